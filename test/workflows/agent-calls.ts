// A test-only workflow that calls one node-local activity on an agent's task queue and
// returns its result, so tests can drive a real agent exactly as workflows do.
import { proxyActivities } from '@temporalio/workflow';
import type { AgentActivities } from '../../agent/activity-types.js';
import { agentTaskQueue } from '../../common/names.js';

export type AgentCall = 'startShard' | 'stopShard' | 'waitHealthy' | 'describe' | 'killProcesses';

export async function agentCall(nodeId: string, activity: AgentCall, arg?: unknown): Promise<unknown> {
  const activities = proxyActivities<AgentActivities>({
    taskQueue: agentTaskQueue(nodeId),
    startToCloseTimeout: '2 minutes',
    heartbeatTimeout: '30 seconds',
    retry: { maximumAttempts: 1 },
  });
  const call = activities[activity] as (arg?: unknown) => Promise<unknown>;
  return await call(arg);
}
