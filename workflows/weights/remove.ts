// `llmgw weights rm NODE MODEL[@REV]`: the `weightsRemove` workflow runs removeWeights on the
// host's queue, which refuses a revision a shard runs (naming the shard) and removes nothing
// then. A workflow only because activities run inside one. Workflow side.
import type { RemoveWeightsInput, RemoveWeightsResult } from '../../agent/weights/remove.js';
import { FailureType } from '../../common/failures.js';
import { agentActivities } from '../toolkit.js';

export async function weightsRemove(input: RemoveWeightsInput & { nodeId: string }): Promise<RemoveWeightsResult> {
  // An agent that is down does not pick it up: the preset says so within 20 s.
  const agent = agentActivities(input.nodeId, `removeWeights ${input.repo}${input.commit ? `@${input.commit}` : ''} on ${input.nodeId}`, {
    startToCloseTimeout: '5 minutes',
    retry: { maximumAttempts: 2, nonRetryableErrorTypes: [FailureType.InvalidInput] },
  });
  return agent.removeWeights({ repo: input.repo, ...(input.commit ? { commit: input.commit } : {}) });
}
