// What every llmgw workflow needs the same way: activity option presets, when to hand over to
// a new run, and how a refused input names what is wrong. Workflow side (deterministic).
import { proxyActivities, workflowInfo, type ActivityOptions, type RetryPolicy } from '@temporalio/workflow';
import type { z } from 'zod';
import type { AgentActivities } from '../agent/activity-types.js';
import type { ControlActivities } from '../activities/index.js';
import { NON_RETRYABLE_AGENT_FAILURES } from '../common/failures.js';
import { agentTaskQueue } from '../common/names.js';
import type { UpgradeWatch } from './upgrade.js';

/**
 * Control activities on `llmgw` with a summary the Web UI shows beside the call. They are quick:
 * a short timeout lets a killed worker's work move on fast. `options` adds to or overrides the preset.
 */
export function controlActivities(summary: string, options: Partial<ActivityOptions> = {}): ControlActivities {
  return proxyActivities<ControlActivities>({ startToCloseTimeout: '20 seconds', retry: { maximumAttempts: 5 }, summary, ...options });
}

/** An agent call's tries: a few, a second apart, and none for a failure a retry cannot mend. */
export const AGENT_RETRY: RetryPolicy = {
  maximumAttempts: 3,
  initialInterval: '1 second',
  nonRetryableErrorTypes: NON_RETRYABLE_AGENT_FAILURES,
};

/**
 * Agent activities on the queue of the host `nodeId` (only its agent polls it), with a summary the
 * Web UI shows beside the call. The preset is an ordinary call to a live agent: an agent that is
 * not polling fails it within 20 s (the caller places elsewhere or tries later rather than wait
 * for ever); two minutes of work; AGENT_RETRY.
 * `options` adds to or overrides the preset, as each kind of call (presence, a fetch, a
 * reconcile's report) waits and retries in its own way; a `retry` replaces AGENT_RETRY whole.
 */
export function agentActivities(nodeId: string, summary: string, options: Partial<ActivityOptions> = {}): AgentActivities {
  return proxyActivities<AgentActivities>({
    taskQueue: agentTaskQueue(nodeId),
    scheduleToStartTimeout: '20 seconds',
    startToCloseTimeout: '120 seconds',
    retry: AGENT_RETRY,
    summary,
    ...options,
  });
}

/**
 * Whether a long-running workflow should continue as new now: a newer build is Current
 * (`llmgw upgrade`), the server suggests it, or the history passed the workflow's own limit.
 */
export function handOverDue(upgrade: UpgradeWatch, historyLimit: number): () => boolean {
  return () => upgrade.requested() || workflowInfo().continueAsNewSuggested || workflowInfo().historyLength > historyLimit;
}

/** A zod error as one line that names each bad path: `replicas: must be ≥ 0; profile: …`. */
export function describeIssues(error: z.ZodError, root = 'input'): string {
  return error.issues.map((issue) => `${issue.path.length ? issue.path.join('.') : root}: ${issue.message}`).join('; ');
}
