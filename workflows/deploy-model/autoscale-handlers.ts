// The deployModel workflow's autoscaling handlers: an autoscaler's decision, a router's wake
// for a deployment at zero, and the operator's bounds. A decision or wake that changes nothing
// is refused by its validator, and a refused Update is not recorded: steady load and several
// routers waking one deployment at once cost no events. Workflow side.
import { ApplicationFailure, setHandler } from '@temporalio/workflow';
import { AutoscaleSchema } from '../../common/autoscale.js';
import { autoscaleUpdate, setAutoscaleUpdate, wakeUpdate } from '../definitions.js';
import type { DeploymentContext } from './handlers.js';
import { deploymentView } from './state.js';
import { describeIssues } from '../toolkit.js';

export function registerAutoscaleHandlers(ctx: DeploymentContext): void {
  setHandler(
    autoscaleUpdate,
    async (decision) => {
      const deployment = await ctx.resolved();
      deployment.lastDecision = { ...decision, at: new Date().toISOString(), from: deployment.desired };
      deployment.desired = decision.desired;
      ctx.dirty = true;
      return deploymentView(deployment);
    },
    {
      validator: (decision) => {
        const deployment = ctx.state;
        if (!deployment) throw new Error('the deployment is still being checked against the catalog');
        if (!deployment.autoscale) throw new Error(`deployment ${deployment.name} is not autoscaled`);
        if (deployment.undeploying) throw new Error(`deployment ${deployment.name} is being undeployed`);
        if (
          !Number.isInteger(decision.desired) ||
          decision.desired < deployment.autoscale.min ||
          decision.desired > deployment.autoscale.max
        ) {
          throw new Error(`desired ${decision.desired} is outside the bounds ${deployment.autoscale.min}–${deployment.autoscale.max}`);
        }
        if (decision.desired === deployment.desired) throw new Error(`already at ${deployment.desired}`);
      },
    },
  );
  setHandler(
    wakeUpdate,
    async ({ reason, by }) => {
      const deployment = await ctx.resolved();
      const desired = Math.max(1, deployment.autoscale?.min ?? 1);
      deployment.lastDecision = {
        desired,
        reason: `woken: ${reason}`,
        at: new Date().toISOString(),
        from: deployment.desired,
        ...(by ? { by } : {}),
      };
      deployment.desired = desired;
      ctx.dirty = true;
      return deploymentView(deployment);
    },
    {
      validator: (_request) => {
        const deployment = ctx.state;
        if (!deployment) throw new Error('the deployment is still being checked against the catalog');
        if (deployment.undeploying) throw new Error(`deployment ${deployment.name} is being undeployed`);
        // Awake already: the first router's wake started a replica, the others' change nothing.
        if (deployment.desired > 0) throw new Error(`already at ${deployment.desired}`);
      },
    },
  );
  setHandler(
    setAutoscaleUpdate,
    async (settings) => {
      const deployment = await ctx.resolved();
      if (settings === null) {
        deployment.autoscale = undefined;
      } else {
        deployment.autoscale = AutoscaleSchema.parse(settings);
        deployment.desired = Math.min(settings.max, Math.max(settings.min, deployment.desired));
      }
      ctx.dirty = true;
      return deploymentView(deployment);
    },
    {
      validator: (settings) => {
        if (settings === null) return;
        const parsed = AutoscaleSchema.safeParse(settings);
        if (!parsed.success) throw new Error(`invalid autoscale settings: ${describeIssues(parsed.error, 'autoscale')}`);
        if (ctx.state && parsed.data.max > ctx.state.maxReplicas)
          throw new Error(`max ${parsed.data.max} is over the maximum of ${ctx.state.maxReplicas} (catalog defaults.maxReplicas)`);
        if (ctx.state?.undeploying) throw ApplicationFailure.nonRetryable(`deployment ${ctx.state.name} is being undeployed`);
      },
    },
  );
}
