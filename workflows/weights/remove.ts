// `llmgw weights rm NODE MODEL[@REV]`: the `weightsRemove` workflow runs removeWeights on the
// host's queue, which refuses a revision a shard runs (naming the shard) and removes nothing
// then. A workflow only because activities run inside one. Workflow side.
import { proxyActivities } from '@temporalio/workflow';
import type { AgentActivities } from '../../agent/activity-types.js';
import type { RemoveWeightsInput, RemoveWeightsResult } from '../../agent/weights/remove.js';
import { FailureType } from '../../common/failures.js';
import { agentTaskQueue } from '../../common/names.js';

export async function weightsRemove(input: RemoveWeightsInput & { nodeId: string }): Promise<RemoveWeightsResult> {
  const agent = proxyActivities<AgentActivities>({
    taskQueue: agentTaskQueue(input.nodeId),
    // An agent that is down does not pick it up: say so soon rather than wait for it.
    scheduleToStartTimeout: '20 seconds',
    startToCloseTimeout: '5 minutes',
    retry: { maximumAttempts: 2, nonRetryableErrorTypes: [FailureType.InvalidInput] },
    summary: `removeWeights ${input.repo}${input.commit ? `@${input.commit}` : ''} on ${input.nodeId}`,
  });
  return agent.removeWeights({ repo: input.repo, ...(input.commit ? { commit: input.commit } : {}) });
}
