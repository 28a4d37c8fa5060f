// The deployModel workflow's rollout handlers: a catalog edit to its profile (which starts a
// rollout by itself under `rollout: auto`) and the operator's rollout Update — to a profile or
// the catalog revision, pause, resume, undo. They change the plan; the main loop drives it
// (rollout-steps.ts). Workflow side.
import { setHandler } from '@temporalio/workflow';
import type { RolloutRequest } from '../../common/replica-types.js';
import { revisionOfSnapshot } from '../../common/revision.js';
import { catalogChangedSignal, rolloutUpdate } from '../definitions.js';
import type { DeploymentContext } from './handlers.js';
import { isActive, note } from './rollout.js';
import { resolveTarget, rollBack, rolloutFailure, startRollout, validateRolloutRequest } from './rollout-steps.js';
import { deploymentView, type DeploymentState } from './state.js';

export function registerRolloutHandlers(ctx: DeploymentContext): void {
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
      if (request.pause || request.resume) pauseOrResume(deployment, request, now);
      else if (request.undo) undo(deployment, request, now);
      else if (!(await rollTo(deployment, request, now))) return deploymentView(deployment);
      ctx.dirty = true;
      return deploymentView(deployment);
    },
    { validator: (request) => validateRolloutRequest(request, ctx.state) },
  );
}

function pauseOrResume(deployment: DeploymentState, request: RolloutRequest, now: string): void {
  const rollout = deployment.rollout!;
  if (request.pause && isActive(rollout)) rollout.state = 'Paused';
  else if (request.resume && rollout.state === 'Paused')
    rollout.state = rollout.reason.startsWith('rolling back') ? 'RollingBack' : 'RollingOut';
  else throw rolloutFailure(`the rollout of ${deployment.name} is ${rollout.state}: nothing to ${request.pause ? 'pause' : 'resume'}`);
  note(rollout, now, request.pause ? 'paused by hand' : 'resumed by hand');
}

/** A rollout under way rolls back; a finished one is followed by a rollout to the revision before. */
function undo(deployment: DeploymentState, request: RolloutRequest, now: string): void {
  if (isActive(deployment.rollout) || deployment.rollout?.state === 'Paused') rollBack(deployment, now, 'undone by hand');
  else if (deployment.previous) startRollout(deployment, deployment.previous, request, now, 'undo by hand');
  else throw rolloutFailure(`deployment ${deployment.name} has no earlier revision to go back to`);
}

/** Starts a rollout to the profile asked for (or the catalog revision); false when already there. */
async function rollTo(deployment: DeploymentState, request: RolloutRequest, now: string): Promise<boolean> {
  const target = await resolveTarget(deployment, request.profile, request.refreshSource);
  if (isActive(deployment.rollout) || deployment.rollout?.state === 'Paused') {
    throw rolloutFailure(
      `a rollout of ${deployment.name} to ${deployment.rollout!.to.profile} ${revisionOfSnapshot(deployment.rollout!.to)} is ${deployment.rollout!.state}: wait for it, or pause/undo it first`,
    );
  }
  const onTarget = Object.values(deployment.replicas).every(
    (r) => r.phase === 'Stopped' || r.phase === 'Failed' || r.revision === revisionOfSnapshot(target),
  );
  if (revisionOfSnapshot(target) === revisionOfSnapshot(deployment.snapshot) && onTarget) return false;
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
  return true;
}
