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
export interface DeploymentRun {
  input: DeployModelInput;
  name: string;
  /** Undefined until the catalog check is done (a continued run has it from the start). */
  s: DeploymentState | undefined;
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

export function createDeploymentRun(input: DeployModelInput, name: string, carried: DeploymentState | undefined): DeploymentRun {
  const run: DeploymentRun = {
    input,
    name,
    s: carried,
    failed: undefined,
    dirty: true,
    autoRolloutWanted: false,
    resolved: () =>
      condition(() => run.s !== undefined || run.failed !== undefined).then(() => {
        if (!run.s) throw ApplicationFailure.nonRetryable(run.failed ?? 'the deployment was not resolved', FailureType.InvalidInput);
        return run.s;
      }),
    markClosed(replicaId, reason) {
      const s = run.s;
      const previous = s?.replicas[replicaId];
      if (!s || !previous || isTerminal(previous)) return;
      log.warn(`${replicaId} ended without reporting: ${reason}`);
      // Failed, to be seen and replaced, but not counted towards the crash-loop backoff: the
      // workflow was ended from outside, its engine did not fail.
      s.replicas[replicaId] = { ...previous, phase: 'Failed', reason, since: new Date().toISOString() };
      run.dirty = true;
    },
  };
  return run;
}

export function registerDeploymentHandlers(run: DeploymentRun): void {
  registerAutoscaleHandlers(run);
  // Every handler first. Until the catalog check is done, signals and updates wait for it.
  setHandler(deploymentStatusQuery, (): DeploymentView =>
    run.s
      ? deploymentView(run.s)
      : {
          name: run.name,
          model: run.input.model,
          profile: run.input.profile ?? '',
          servedName: '',
          phase: run.failed ? 'Failed' : 'Validating',
          desired: run.input.replicas ?? 1,
          ready: 0,
          replicas: [],
          reason: run.failed ?? 'checking the request against the catalog and the fleet',
        },
  );
  // Before replicaStatus: a rebuilt replica must be known before it reports.
  setHandler(adoptReplicaSignal, async ({ replicaId, seq, reason }) => {
    const d = await run.resolved().catch(() => undefined);
    if (!d || d.replicas[replicaId]) return;
    log.info(`adopting ${replicaId}: ${reason}`);
    const since = new Date().toISOString();
    d.replicas[replicaId] = {
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
    d.nextSeq = Math.max(d.nextSeq, seq + 1);
    // A rebuilt deployment wants what was found running; a live one keeps its own count
    // (and drains the extra replica if it has too many).
    if (d.rebuilt && !d.undeploying) d.desired = Math.min(d.maxReplicas, Math.max(d.desired, activeReplicas(d).length));
    run.dirty = true;
  });
  setHandler(replicaStatusSignal, async (replicaView) => {
    const d = await run.resolved().catch(() => undefined);
    const previous = d?.replicas[replicaView.replicaId];
    if (!d || !previous) return; // a replica of an older deployment with this name
    d.replicas[replicaView.replicaId] = { ...replicaView, stopping: previous.stopping, routed: previous.routed };
    if (replicaView.phase === 'Failed' && previous.phase !== 'Failed') d.failureTimes.push(new Date().toISOString());
    run.dirty = true;
  });
  setHandler(replicaClosedSignal, async ({ replicaId, reason }) => {
    await run.resolved().catch(() => undefined);
    run.markClosed(replicaId, reason);
  });
  setHandler(
    scaleUpdate,
    async (replicas) => {
      const d = await run.resolved();
      if (replicas > d.maxReplicas)
        throw ApplicationFailure.nonRetryable(`replicas must be at most ${d.maxReplicas} (catalog defaults.maxReplicas), got ${replicas}`);
      if (d.undeploying) throw ApplicationFailure.nonRetryable(`deployment ${d.name} is being undeployed`);
      d.desired = replicas;
      run.dirty = true;
      return deploymentView(d);
    },
    {
      validator: (replicas) => {
        if (!Number.isInteger(replicas) || replicas < 0) throw new Error(`replicas must be a whole number ≥ 0, got ${replicas}`);
        if (run.s && replicas > run.s.maxReplicas)
          throw new Error(`replicas must be a whole number from 0 to ${run.s.maxReplicas}, got ${replicas}`);
        if (run.s?.undeploying) throw new Error(`deployment ${run.s.name} is being undeployed`);
        if (run.failed) throw new Error(run.failed);
        if (run.s?.autoscale) {
          const { min, max } = run.s.autoscale;
          throw new Error(
            `deployment ${run.s.name} is autoscaled between ${min} and ${max}: change its bounds (\`llmgw scale ${run.s.name} --min A --max B\`, the setAutoscale Update) or turn autoscaling off (\`--no-autoscale\`), rather than fight it`,
          );
        }
      },
    },
  );
  setHandler(undeployUpdate, async () => {
    const d = await run.resolved();
    d.undeploying = true;
    d.desired = 0;
    run.dirty = true;
    return deploymentView(d);
  });
  setHandler(catalogChangedSignal, async ({ profile, revision }) => {
    const d = await run.resolved().catch(() => undefined);
    if (!d || profile !== d.snapshot.profile || d.catalogRevision === revision) return;
    d.catalogRevision = revision;
    if (d.policy?.auto) run.autoRolloutWanted = true;
    run.dirty = true;
  });
  setHandler(
    rolloutUpdate,
    async (request) => {
      const d = await run.resolved();
      const now = new Date().toISOString();
      validateRolloutRequest(request, d);
      if (request.pause || request.resume) {
        const r = d.rollout!;
        if (request.pause && isActive(r)) r.state = 'Paused';
        else if (request.resume && r.state === 'Paused') r.state = r.reason.startsWith('rolling back') ? 'RollingBack' : 'RollingOut';
        else throw rolloutFailure(`the rollout of ${d.name} is ${r.state}: nothing to ${request.pause ? 'pause' : 'resume'}`);
        note(r, now, request.pause ? 'paused by hand' : 'resumed by hand');
      } else if (request.undo) {
        if (isActive(d.rollout) || d.rollout?.state === 'Paused') rollBack(d, now, 'undone by hand');
        else if (d.previous) startRollout(d, d.previous, request, now, 'undo by hand');
        else throw rolloutFailure(`deployment ${d.name} has no earlier revision to go back to`);
      } else {
        const target = await resolveTarget(d, request.profile, request.refreshSource);
        if (isActive(d.rollout) || d.rollout?.state === 'Paused') {
          throw rolloutFailure(
            `a rollout of ${d.name} to ${d.rollout!.to.profile} ${revisionOfSnapshot(d.rollout!.to)} is ${d.rollout!.state}: wait for it, or pause/undo it first`,
          );
        }
        const onTarget = Object.values(d.replicas).every(
          (r) => r.phase === 'Stopped' || r.phase === 'Failed' || r.revision === revisionOfSnapshot(target),
        );
        if (revisionOfSnapshot(target) === revisionOfSnapshot(d.snapshot) && onTarget) return deploymentView(d);
        startRollout(
          d,
          target,
          request,
          now,
          request.profile
            ? `rollout to profile ${request.profile}`
            : request.refreshSource && target.modelSource !== d.snapshot.modelSource
              ? `rollout to ${target.modelSource} (source refreshed)`
              : 'rollout to the catalog revision',
        );
      }
      run.dirty = true;
      return deploymentView(d);
    },
    { validator: (request) => validateRolloutRequest(request, run.s) },
  );
}
