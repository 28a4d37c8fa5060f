// The activities a replica calls, with the timeouts and summaries the Web UI shows beside
// each call: control activities on `llmgw`, agent activities on each host's own queue.
// Workflow side.
import { ActivityCancellationType, proxyActivities } from '@temporalio/workflow';
import type { AgentActivities } from '../../agent/activity-types.js';
import type { ControlActivities } from '../../activities/index.js';
import { FailureType } from '../../common/failures.js';
import { agentTaskQueue } from '../../common/names.js';
import type { SleepActivities } from '../../common/sleep-types.js';
import { AGENT_RETRY, agentActivities, controlActivities } from '../toolkit.js';

/** Control activities with a summary the Web UI shows beside each call. */
export function control(summary: string): ControlActivities {
  return controlActivities(summary, {
    retry: { maximumAttempts: 5, nonRetryableErrorTypes: [FailureType.UnknownModel, FailureType.UnknownProfile] },
  });
}

export function agent(
  nodeId: string,
  options: { summary: string; startToCloseSeconds?: number; heartbeatSeconds?: number; quick?: boolean },
): AgentActivities {
  return agentActivities(nodeId, options.summary, {
    // A quick call (an agent already thought gone) gets one short try.
    ...(options.quick ? { scheduleToStartTimeout: '5 seconds', retry: { ...AGENT_RETRY, maximumAttempts: 1 } } : {}),
    ...(options.startToCloseSeconds ? { startToCloseTimeout: `${options.startToCloseSeconds} seconds` } : {}),
    ...(options.heartbeatSeconds ? { heartbeatTimeout: `${options.heartbeatSeconds} seconds` } : {}),
    // A cancelled call (a stop, a lost host) resolves only once the agent has given it up or its
    // heartbeat lapsed: the replica never moves on while an engine it asked for may still start.
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  });
}

/**
 * The agent's sleep activities on the host `nodeId` (common/sleep-types.ts), as agent calls are
 * made: a host whose agent does not poll fails the call within 20 s. `once`: a single try (a
 * question an older agent may not know how to answer).
 */
export function sleepCalls(nodeId: string, summary: string, options: { once?: boolean } = {}): SleepActivities {
  return proxyActivities<SleepActivities>({
    taskQueue: agentTaskQueue(nodeId),
    scheduleToStartTimeout: '20 seconds',
    // Level 1 copies the weights to host RAM and back: tens of seconds for a large model.
    startToCloseTimeout: '120 seconds',
    retry: options.once ? { ...AGENT_RETRY, maximumAttempts: 1 } : AGENT_RETRY,
    summary,
  });
}
