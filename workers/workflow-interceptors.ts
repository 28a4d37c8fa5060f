// Workflow interceptors of the control worker: counts every action a reconcileNode run
// planned, by kind and outcome, from its result (llmgw_reconcile_actions). Runs inside the
// workflow sandbox; the SDK's workflow metric meter emits nothing while a history replays,
// so a run is counted once, when it completes live.
import { metricMeter, workflowInfo, type WorkflowInterceptorsFactory } from '@temporalio/workflow';
import { WORKER_METRICS } from '../common/metrics.js';
import type { ReconcileResult } from '../common/reconcile-types.js';

function isReconcileResult(value: unknown): value is ReconcileResult {
  return typeof value === 'object' && value !== null && Array.isArray((value as { actions?: unknown }).actions);
}

export const interceptors: WorkflowInterceptorsFactory = () => ({
  inbound: [
    {
      async execute(input, next) {
        const result = await next(input);
        if (workflowInfo().workflowType === 'reconcileNode' && isReconcileResult(result)) {
          const def = WORKER_METRICS.reconcileActions;
          const counter = metricMeter.createCounter(def.name, undefined, def.help);
          for (const action of result.actions) {
            const outcome = result.dryRun ? 'dry-run' : action.effective ? 'done' : 'not-done';
            counter.add(1, { kind: action.kind, outcome });
          }
        }
        return result;
      },
    },
  ],
});
