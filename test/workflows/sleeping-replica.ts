// A workflow used only by test/e2e/router-wake-temporal.test.ts: a replica's `wakeReplica`
// Update and nothing else, answering who asked, so the router's Temporal wake caller can be
// checked against a real server without the replica workflow (built elsewhere).
import { condition, defineQuery, setHandler, workflowInfo } from '@temporalio/workflow';
import { wakeReplicaUpdate } from '../../workflows/definitions.js';

export const wokenByQuery = defineQuery<string[]>('wokenBy');

export async function sleepingReplicaStub(): Promise<void> {
  const wokenBy: string[] = [];
  setHandler(wakeReplicaUpdate, (request) => {
    wokenBy.push(request.by);
    return { replicaId: workflowInfo().workflowId, wokeInMs: 7, alreadyAwake: wokenBy.length > 1 };
  });
  setHandler(wokenByQuery, () => wokenBy);
  await condition(() => false);
}
