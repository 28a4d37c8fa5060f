// The deployModel workflow's handlers, registered before its first await: the status query,
// what replicas and reconciliation tell it, and the operator's Updates (scale, undeploy; the
// rollout ones in rollout-handlers.ts, autoscaling in autoscale-handlers.ts). Until the catalog
// check is done, signals and updates wait for it. Also the context they share with the loop.
import { ApplicationFailure, condition, log, setHandler } from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import type { DeployModelInput, DeploymentView } from '../../common/replica-types.js';
import {
  adoptReplicaSignal,
  deploymentStatusQuery,
  replicaClosedSignal,
  replicaStatusSignal,
  scaleUpdate,
  undeployUpdate,
} from '../definitions.js';
import { registerAutoscaleHandlers } from './autoscale-handlers.js';
import { registerRolloutHandlers } from './rollout-handlers.js';
import { activeReplicas, deploymentView, isTerminal, type DeploymentState } from './state.js';

/** What the handlers and the main loop share. */
export interface DeploymentContext {
  input: DeployModelInput;
  name: string;
  /** Undefined until the catalog check is done (a continued run has it from the start). */
  state: DeploymentState | undefined;
  /** Why the deployment was refused, once it was. */
  failed: string | undefined;
  /** Something changed: the main loop looks again. */
  dirty: boolean;
  /** A catalog edit arrived for a deployment started with `rollout: auto`. */
  autoRolloutWanted: boolean;
  resolved(): Promise<DeploymentState>;
  /** A replica ended without its final report: Failed, to be replaced. */
  markClosed(replicaId: string, reason: string): void;
}

export function createDeploymentContext(input: DeployModelInput, name: string, carried: DeploymentState | undefined): DeploymentContext {
  const ctx: DeploymentContext = {
    input,
    name,
    state: carried,
    failed: undefined,
    dirty: true,
    autoRolloutWanted: false,
    resolved: () =>
      condition(() => ctx.state !== undefined || ctx.failed !== undefined).then(() => {
        if (!ctx.state) throw ApplicationFailure.nonRetryable(ctx.failed ?? 'the deployment was not resolved', FailureType.InvalidInput);
        return ctx.state;
      }),
    markClosed(replicaId, reason) {
      const deployment = ctx.state;
      const previous = deployment?.replicas[replicaId];
      if (!deployment || !previous || isTerminal(previous)) return;
      log.warn(`${replicaId} ended without reporting: ${reason}`);
      // Failed, to be seen and replaced, but not counted towards the crash-loop backoff: the
      // workflow was ended from outside, its engine did not fail.
      deployment.replicas[replicaId] = { ...previous, phase: 'Failed', reason, since: new Date().toISOString() };
      ctx.dirty = true;
    },
  };
  return ctx;
}

export function registerDeploymentHandlers(ctx: DeploymentContext): void {
  registerAutoscaleHandlers(ctx);
  // Every handler first. Until the catalog check is done, signals and updates wait for it.
  registerStatusQuery(ctx);
  registerReplicaReports(ctx);
  registerScaleAndUndeploy(ctx);
  registerRolloutHandlers(ctx);
}

/** Before the catalog check is done, the view says so (or why the deployment was refused). */
function registerStatusQuery(ctx: DeploymentContext): void {
  setHandler(deploymentStatusQuery, (): DeploymentView =>
    ctx.state
      ? deploymentView(ctx.state)
      : {
          name: ctx.name,
          model: ctx.input.model,
          profile: ctx.input.profile ?? '',
          servedName: '',
          phase: ctx.failed ? 'Failed' : 'Validating',
          desired: ctx.input.replicas ?? 1,
          ready: 0,
          replicas: [],
          reason: ctx.failed ?? 'checking the request against the catalog and the fleet',
        },
  );
}

/** What replicas and reconciliation report: a rebuilt replica, a replica's status, its end. */
function registerReplicaReports(ctx: DeploymentContext): void {
  // Before replicaStatus: a rebuilt replica must be known before it reports.
  setHandler(adoptReplicaSignal, async ({ replicaId, seq, reason }) => {
    const deployment = await ctx.resolved().catch(() => undefined);
    if (!deployment || deployment.replicas[replicaId]) return;
    log.info(`adopting ${replicaId}: ${reason}`);
    const since = new Date().toISOString();
    deployment.replicas[replicaId] = {
      replicaId,
      seq,
      phase: 'Pending',
      reason: 'rebuilt by reconciliation; waiting for its first report',
      nodes: [],
      gpus: [],
      endpoint: '',
      shards: [],
      placements: 1,
      restarts: 0,
      since,
      stopping: false,
    };
    deployment.nextSeq = Math.max(deployment.nextSeq, seq + 1);
    // A rebuilt deployment wants what was found running; a live one keeps its own count
    // (and drains the extra replica if it has too many).
    if (deployment.rebuilt && !deployment.undeploying)
      deployment.desired = Math.min(deployment.maxReplicas, Math.max(deployment.desired, activeReplicas(deployment).length));
    ctx.dirty = true;
  });
  setHandler(replicaStatusSignal, async (replicaView) => {
    const deployment = await ctx.resolved().catch(() => undefined);
    const previous = deployment?.replicas[replicaView.replicaId];
    if (!deployment || !previous) return; // a replica of an older deployment with this name
    deployment.replicas[replicaView.replicaId] = { ...replicaView, stopping: previous.stopping, routed: previous.routed };
    if (replicaView.phase === 'Failed' && previous.phase !== 'Failed') deployment.failureTimes.push(new Date().toISOString());
    ctx.dirty = true;
  });
  setHandler(replicaClosedSignal, async ({ replicaId, reason }) => {
    await ctx.resolved().catch(() => undefined);
    ctx.markClosed(replicaId, reason);
  });
}

/** The operator's count: scale (refused while autoscaled) and undeploy. */
function registerScaleAndUndeploy(ctx: DeploymentContext): void {
  setHandler(
    scaleUpdate,
    async (replicas) => {
      const deployment = await ctx.resolved();
      if (replicas > deployment.maxReplicas)
        throw ApplicationFailure.nonRetryable(
          `replicas must be at most ${deployment.maxReplicas} (catalog defaults.maxReplicas), got ${replicas}`,
        );
      if (deployment.undeploying) throw ApplicationFailure.nonRetryable(`deployment ${deployment.name} is being undeployed`);
      deployment.desired = replicas;
      ctx.dirty = true;
      return deploymentView(deployment);
    },
    {
      validator: (replicas) => {
        if (!Number.isInteger(replicas) || replicas < 0) throw new Error(`replicas must be a whole number ≥ 0, got ${replicas}`);
        if (ctx.state && replicas > ctx.state.maxReplicas)
          throw new Error(`replicas must be a whole number from 0 to ${ctx.state.maxReplicas}, got ${replicas}`);
        if (ctx.state?.undeploying) throw new Error(`deployment ${ctx.state.name} is being undeployed`);
        if (ctx.failed) throw new Error(ctx.failed);
        if (ctx.state?.autoscale) {
          const { min, max } = ctx.state.autoscale;
          throw new Error(
            `deployment ${ctx.state.name} is autoscaled between ${min} and ${max}: change its bounds (\`llmgw scale ${ctx.state.name} --min A --max B\`, the setAutoscale Update) or turn autoscaling off (\`--no-autoscale\`), rather than fight it`,
          );
        }
      },
    },
  );
  setHandler(undeployUpdate, async () => {
    const deployment = await ctx.resolved();
    deployment.undeploying = true;
    deployment.desired = 0;
    ctx.dirty = true;
    return deploymentView(deployment);
  });
}
