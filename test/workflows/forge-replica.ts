// A namespace member's workflow (issue 37): started under a replica's id on a queue of its own,
// it continues as new into the real `replica` on the control plane's queue with whatever it
// likes to carry, say a Ready state with an ended replica's ticket and an endpoint of its own.
import { makeContinueAsNewFunc } from '@temporalio/workflow';
import type { ReplicaInput } from '../../common/replica-types.js';

export async function forgeReplica(input: ReplicaInput): Promise<void> {
  await makeContinueAsNewFunc<(input: ReplicaInput) => Promise<void>>({ workflowType: 'replica', taskQueue: 'llmgw' })(input);
}
