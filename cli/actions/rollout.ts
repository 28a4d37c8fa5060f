// `llmgw rollout NAME`: the deployment's `rollout` Update (the same plain JSON the Temporal CLI
// sends), and with --wait each step as the deployment records it, until it completes or rolls
// back. Operator side.
import { WorkflowNotFoundError } from '@temporalio/client';
import { deploymentWorkflowId } from '../../common/names.js';
import type { DeploymentView, RolloutRequest } from '../../common/replica-types.js';
import { deploymentStatusQuery, rolloutUpdate } from '../../workflows/definitions.js';
import { withClient } from './client.js';
import { CliError, failureMessage } from '../errors.js';

export interface RolloutOptions {
  profile?: string;
  maxSurge?: string;
  maxUnavailable?: string;
  undo?: boolean;
  pause?: boolean;
  resume?: boolean;
  refreshSource?: boolean;
  /** false with --no-prefetch. */
  prefetch?: boolean;
  wait?: boolean;
  timeout: string;
  json?: boolean;
}

function whole(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new CliError(`${flag} must be a whole number ≥ 0, got ${value}`);
  return n;
}

export async function rolloutCommand(name: string, opts: RolloutOptions): Promise<void> {
  const request: RolloutRequest = {
    ...(opts.profile ? { profile: opts.profile } : {}),
    ...(whole('--max-surge', opts.maxSurge) !== undefined ? { maxSurge: whole('--max-surge', opts.maxSurge) } : {}),
    ...(whole('--max-unavailable', opts.maxUnavailable) !== undefined
      ? { maxUnavailable: whole('--max-unavailable', opts.maxUnavailable) }
      : {}),
    ...(opts.undo ? { undo: true } : {}),
    ...(opts.pause ? { pause: true } : {}),
    ...(opts.resume ? { resume: true } : {}),
    ...(opts.refreshSource ? { refreshSource: true } : {}),
    ...(opts.prefetch === false ? { prefetch: false } : {}),
  };
  await withClient(async (client) => {
    const handle = client.workflow.getHandle(deploymentWorkflowId(name));
    let view: DeploymentView;
    try {
      view = await handle.executeUpdate(rolloutUpdate, { args: [request] });
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name} (\`llmgw status\` lists them)`);
      throw new CliError(failureMessage(error));
    }
    const rollout = view.rollout;
    if (!rollout || rollout.state === 'Complete') {
      if (!opts.wait || !rollout) {
        const pin =
          view.modelSource?.startsWith('hf://') && !opts.refreshSource
            ? ` (weights kept at ${view.modelSource}; --refresh-source moves them to what the ref points at now)`
            : '';
        console.log(
          opts.json ? JSON.stringify(view, null, 2) : `${name} already runs revision ${view.revision}: nothing to roll out${pin}`,
        );
        return;
      }
    }
    if (!opts.wait) {
      console.log(opts.json ? JSON.stringify(view, null, 2) : `${name}: ${view.reason}`);
      return;
    }
    const deadline = Date.now() + Number(opts.timeout) * 1000;
    const printed = new Set<string>();
    for (;;) {
      const now = await handle.query(deploymentStatusQuery);
      // The deployment keeps the last steps as a window: print each once.
      for (const step of now.rollout?.steps ?? []) {
        if (printed.has(step)) continue;
        printed.add(step);
        if (!opts.json) console.error(step);
      }
      const state = now.rollout?.state;
      if (state === 'Complete') {
        console.log(opts.json ? JSON.stringify(now, null, 2) : `${name}: rollout complete, every replica runs ${now.rollout!.to}`);
        return;
      }
      if (state === 'RolledBack' || state === 'Failed') throw new CliError(`${name}: rollout ${state}: ${now.rollout!.reason}`);
      if (Date.now() > deadline) throw new CliError(`${name}: rollout not complete after ${opts.timeout} s: ${now.reason}`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  });
}
