// The activities a replica calls, with the timeouts and summaries the Web UI shows beside
// each call: control activities on `llmgw`, agent activities on each host's own queue.
// Workflow side.
import { ActivityCancellationType, proxyActivities } from '@temporalio/workflow';
import type { AgentActivities } from '../../agent/activity-types.js';
import type { ControlActivities } from '../../activities/index.js';
import { agentTaskQueue } from '../../common/names.js';
import { FailureType, NON_RETRYABLE_AGENT_FAILURES } from '../../common/failures.js';
import { controlActivities } from '../toolkit.js';

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
  return proxyActivities<AgentActivities>({
    taskQueue: agentTaskQueue(nodeId),
    // No agent polling its queue → fail fast and place elsewhere rather than wait for ever.
    // A quick call (an agent already thought gone) gets one short try.
    scheduleToStartTimeout: options.quick ? '5 seconds' : '20 seconds',
    startToCloseTimeout: `${options.startToCloseSeconds ?? 120} seconds`,
    heartbeatTimeout: options.heartbeatSeconds ? `${options.heartbeatSeconds} seconds` : undefined,
    retry: { maximumAttempts: options.quick ? 1 : 3, initialInterval: '1 second', nonRetryableErrorTypes: NON_RETRYABLE_AGENT_FAILURES },
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    summary: options.summary,
  });
}
