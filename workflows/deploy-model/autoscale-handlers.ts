// The deployModel workflow's autoscaling handlers: an autoscaler's decision, a router's wake
// for a deployment at zero, and the operator's bounds. A decision or wake that changes nothing
// is refused by its validator, and a refused Update is not recorded: steady load and several
// routers waking one deployment at once cost no events. Workflow side.
import { ApplicationFailure, setHandler } from '@temporalio/workflow';
import { AutoscaleSchema } from '../../common/autoscale.js';
import { autoscaleUpdate, setAutoscaleUpdate, wakeUpdate } from '../definitions.js';
import type { DeploymentRun } from './handlers.js';
import { deploymentView } from './state.js';
import { describeIssues } from '../toolkit.js';

export function registerAutoscaleHandlers(run: DeploymentRun): void {
  setHandler(
    autoscaleUpdate,
    async (decision) => {
      const d = await run.resolved();
      d.lastDecision = { ...decision, at: new Date().toISOString(), from: d.desired };
      d.desired = decision.desired;
      run.dirty = true;
      return deploymentView(d);
    },
    {
      validator: (decision) => {
        const d = run.s;
        if (!d) throw new Error('the deployment is still being checked against the catalog');
        if (!d.autoscale) throw new Error(`deployment ${d.name} is not autoscaled`);
        if (d.undeploying) throw new Error(`deployment ${d.name} is being undeployed`);
        if (!Number.isInteger(decision.desired) || decision.desired < d.autoscale.min || decision.desired > d.autoscale.max) {
          throw new Error(`desired ${decision.desired} is outside the bounds ${d.autoscale.min}–${d.autoscale.max}`);
        }
        if (decision.desired === d.desired) throw new Error(`already at ${d.desired}`);
      },
    },
  );
  setHandler(
    wakeUpdate,
    async ({ reason, by }) => {
      const d = await run.resolved();
      const desired = Math.max(1, d.autoscale?.min ?? 1);
      d.lastDecision = { desired, reason: `woken: ${reason}`, at: new Date().toISOString(), from: d.desired, ...(by ? { by } : {}) };
      d.desired = desired;
      run.dirty = true;
      return deploymentView(d);
    },
    {
      validator: (_request) => {
        const d = run.s;
        if (!d) throw new Error('the deployment is still being checked against the catalog');
        if (d.undeploying) throw new Error(`deployment ${d.name} is being undeployed`);
        // Awake already: the first router's wake started a replica, the others' change nothing.
        if (d.desired > 0) throw new Error(`already at ${d.desired}`);
      },
    },
  );
  setHandler(
    setAutoscaleUpdate,
    async (settings) => {
      const d = await run.resolved();
      if (settings === null) {
        d.autoscale = undefined;
      } else {
        d.autoscale = AutoscaleSchema.parse(settings);
        d.desired = Math.min(settings.max, Math.max(settings.min, d.desired));
      }
      run.dirty = true;
      return deploymentView(d);
    },
    {
      validator: (settings) => {
        if (settings === null) return;
        const parsed = AutoscaleSchema.safeParse(settings);
        if (!parsed.success) throw new Error(`invalid autoscale settings: ${describeIssues(parsed.error, 'autoscale')}`);
        if (run.s && parsed.data.max > run.s.maxReplicas)
          throw new Error(`max ${parsed.data.max} is over the maximum of ${run.s.maxReplicas} (catalog defaults.maxReplicas)`);
        if (run.s?.undeploying) throw ApplicationFailure.nonRetryable(`deployment ${run.s.name} is being undeployed`);
      },
    },
  );
}
