// What every llmgw workflow needs the same way: activity option presets, when to hand over to
// a new run, and how a refused input names what is wrong. Workflow side (deterministic).
import { proxyActivities, workflowInfo, type ActivityOptions } from '@temporalio/workflow';
import type { z } from 'zod';
import type { ControlActivities } from '../activities/index.js';
import type { UpgradeWatch } from './upgrade.js';

/**
 * Control activities on `llmgw` with a summary the Web UI shows beside the call. They are quick:
 * a short timeout lets a killed worker's work move on fast. `options` adds to or overrides the preset.
 */
export function controlActivities(summary: string, options: Partial<ActivityOptions> = {}): ControlActivities {
  return proxyActivities<ControlActivities>({ startToCloseTimeout: '20 seconds', retry: { maximumAttempts: 5 }, summary, ...options });
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
