// A test-only workflow that calls one node-local activity on an agent's task queue and
// returns its result, so tests can drive a real agent exactly as workflows do.
import { allHandlersFinished, condition, defineSignal, defineUpdate, proxyActivities, setHandler } from '@temporalio/workflow';
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

/** The argument of an agentCallBound, sent once its run (and so its run chain) is known. */
export const agentCallArgSignal = defineSignal<[unknown]>('agentCallArg');

/**
 * agentCall whose argument comes by signal: a test signs a start's placement ticket for this
 * workflow's run chain, which exists only once the workflow has started (as placement does).
 */
export async function agentCallBound(nodeId: string, activity: AgentCall): Promise<unknown> {
  let arg: { value: unknown } | undefined;
  setHandler(agentCallArgSignal, (value) => void (arg = { value }));
  await condition(() => arg !== undefined);
  return agentCall(nodeId, activity, arg!.value);
}

/** One call of an agentSession: run on the agent, its result returned as the Update's. */
export const agentSessionCall = defineUpdate<unknown, [AgentCall, unknown]>('agentSessionCall');
export const agentSessionEnd = defineSignal('agentSessionEnd');

/**
 * A stand-in for a replica's run chain: every call comes from this one run, as a replica starts
 * and later stops its own shards (the agent stops a ticketed shard only for its chain). Ends on
 * agentSessionEnd.
 */
export async function agentSession(nodeId: string): Promise<void> {
  let ended = false;
  setHandler(agentSessionCall, (activity, arg) => agentCall(nodeId, activity, arg));
  setHandler(agentSessionEnd, () => void (ended = true));
  await condition(() => ended && allHandlersFinished());
}
