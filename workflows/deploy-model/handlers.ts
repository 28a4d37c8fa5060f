// The deployModel workflow's handlers, registered before its first await: the status query,
// what replicas and reconciliation tell it, and the operator's Updates (scale, undeploy,
// rollout). Until the catalog check is done, signals and updates wait for it. Workflow side.
import { ApplicationFailure, condition, log, setHandler } from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import type { DeployModelInput, DeploymentView } from '../../common/replica-types.js';
import { revisionOfSnapshot } from '../../common/revision.js';
import {
  adoptReplicaSignal,
  catalogChangedSignal,
  deploymentStatusQuery,
  replicaClosedSignal,
  replicaStatusSignal,
  rolloutUpdate,
  scaleUpdate,
  undeployUpdate,
} from '../definitions.js';
import { isActive, note } from './rollout.js';
import { registerAutoscaleHandlers } from './autoscale-handlers.js';
import { resolveTarget, rollBack, rolloutFailure, startRollout, validateRolloutRequest } from './rollout-steps.js';
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
  setHandler(catalogChangedSignal, async ({ profile, revision }) => {
    const deployment = await ctx.resolved().catch(() => undefined);
    if (!deployment || profile !== deployment.snapshot.profile || deployment.catalogRevision === revision) return;
    deployment.catalogRevision = revision;
    if (deployment.policy?.auto) ctx.autoRolloutWanted = true;
    ctx.dirty = true;
  });
  setHandler(
    rolloutUpdate,
    async (request) => {
      const deployment = await ctx.resolved();
      const now = new Date().toISOString();
      validateRolloutRequest(request, deployment);
      if (request.pause || request.resume) {
        const rollout = deployment.rollout!;
        if (request.pause && isActive(rollout)) rollout.state = 'Paused';
        else if (request.resume && rollout.state === 'Paused')
          rollout.state = rollout.reason.startsWith('rolling back') ? 'RollingBack' : 'RollingOut';
        else
          throw rolloutFailure(`the rollout of ${deployment.name} is ${rollout.state}: nothing to ${request.pause ? 'pause' : 'resume'}`);
        note(rollout, now, request.pause ? 'paused by hand' : 'resumed by hand');
      } else if (request.undo) {
        if (isActive(deployment.rollout) || deployment.rollout?.state === 'Paused') rollBack(deployment, now, 'undone by hand');
        else if (deployment.previous) startRollout(deployment, deployment.previous, request, now, 'undo by hand');
        else throw rolloutFailure(`deployment ${deployment.name} has no earlier revision to go back to`);
      } else {
        const target = await resolveTarget(deployment, request.profile, request.refreshSource);
        if (isActive(deployment.rollout) || deployment.rollout?.state === 'Paused') {
          throw rolloutFailure(
            `a rollout of ${deployment.name} to ${deployment.rollout!.to.profile} ${revisionOfSnapshot(deployment.rollout!.to)} is ${deployment.rollout!.state}: wait for it, or pause/undo it first`,
          );
        }
        const onTarget = Object.values(deployment.replicas).every(
          (r) => r.phase === 'Stopped' || r.phase === 'Failed' || r.revision === revisionOfSnapshot(target),
        );
        if (revisionOfSnapshot(target) === revisionOfSnapshot(deployment.snapshot) && onTarget) return deploymentView(deployment);
        startRollout(
          deployment,
          target,
          request,
          now,
          request.profile
            ? `rollout to profile ${request.profile}`
            : request.refreshSource && target.modelSource !== deployment.snapshot.modelSource
              ? `rollout to ${target.modelSource} (source refreshed)`
              : 'rollout to the catalog revision',
        );
      }
      ctx.dirty = true;
      return deploymentView(deployment);
    },
    { validator: (request) => validateRolloutRequest(request, ctx.state) },
  );
}
