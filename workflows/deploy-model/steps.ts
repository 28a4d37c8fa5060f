// One pass of the deployModel workflow's loop, as a table: from the deployment's state it picks
// the one move due now — hold a paused rollout, drive a rollout, replace missing replicas, drain
// extra ones, or nothing — and carries it out. The loop in workflow.ts publishes after each pass
// and waits for the next change (or the wait a move asks for). Workflow side.
import { getExternalWorkflowHandle, log } from '@temporalio/workflow';
import { revisionOfSnapshot } from '../../common/revision.js';
import { stopReplicaSignal } from '../definitions.js';
import { startReplica } from './calls.js';
import type { DeploymentContext } from './handlers.js';
import { closeReason, profileStillInCatalog } from './resolve.js';
import { isActive } from './rollout.js';
import { confirmRouted, driveRollout, resolveTarget, startRollout } from './rollout-steps.js';
import { activeReplicas, drainVictims, pruneFinished, replacementDelayMs, type DeploymentState, type TrackedReplica } from './state.js';

/** What one pass works on; the records live as long as the run (not carried across continue-as-new). */
export interface DeploymentPass {
  ctx: DeploymentContext;
  deployment: DeploymentState;
  /** Replicas not stopping, counted against the desired number. */
  serving: TrackedReplica[];
  /** Replicas whose routing this run has asked the routes workflow to confirm. */
  routedAsked: Record<string, boolean>;
  /** Prefetches this run started, by rollout start. */
  prefetches: Record<string, boolean>;
}

type Move = 'hold' | 'rollout' | 'replace' | 'drain' | 'none';

/** Each move returns how long to wait before looking again even if nothing reports. */
const MOVES: Record<Move, (pass: DeploymentPass) => Promise<number | undefined> | number | undefined> = {
  // Held where it is until resumed or undone: neither the rollout nor the count moves.
  hold: () => undefined,
  rollout: driveRolloutPass,
  replace: replaceMissing,
  drain: drainExtra,
  none: () => undefined,
};

function nextMove({ deployment, serving }: DeploymentPass): Move {
  if (deployment.rollout?.state === 'Paused' && !deployment.undeploying) return 'hold';
  if (isActive(deployment.rollout) && !deployment.undeploying) return 'rollout';
  if (serving.length < deployment.desired) return 'replace';
  if (serving.length > deployment.desired) return 'drain';
  return 'none';
}

/** One pass: an automatic rollout if one is due, then the move due now; returns the wait it asks for. */
export async function runPass(
  ctx: DeploymentContext,
  deployment: DeploymentState,
  records: Pick<DeploymentPass, 'routedAsked' | 'prefetches'>,
): Promise<number | undefined> {
  pruneFinished(deployment, Date.now());
  const pass: DeploymentPass = { ctx, deployment, serving: activeReplicas(deployment).filter((r) => !r.stopping), ...records };
  if (
    ctx.autoRolloutWanted &&
    !isActive(deployment.rollout) &&
    !deployment.undeploying &&
    deployment.catalogRevision !== revisionOfSnapshot(deployment.snapshot)
  )
    await startAutoRollout(ctx, deployment);
  return MOVES[nextMove(pass)](pass);
}

/** A catalog edit under `rollout: auto`: a rollout to the catalog revision, unless it cannot resolve. */
async function startAutoRollout(ctx: DeploymentContext, deployment: DeploymentState): Promise<void> {
  ctx.autoRolloutWanted = false;
  const target = await resolveTarget(deployment, undefined).catch((error: unknown) => {
    log.warn(`automatic rollout of ${deployment.name} not started: ${String(error)}`);
    return undefined;
  });
  if (target) startRollout(deployment, target, {}, new Date().toISOString(), 'catalog edit (rollout: auto)');
}

async function driveRolloutPass({ ctx, deployment, routedAsked, prefetches }: DeploymentPass): Promise<number | undefined> {
  const shape = (): string => `${deployment.rollout?.state}/${deployment.rollout?.mode}/${deployment.rollout?.startedAt}`;
  const before = shape();
  await driveRollout(deployment, new Date().toISOString(), {
    continueAsNewAfterEvents: ctx.input.continueAsNewAfterEvents,
    markClosed: ctx.markClosed,
    prefetches,
    wake: () => void (ctx.dirty = true),
  });
  // A rollback or a change of mode is planned again at once, not at the next report.
  if (shape() !== before) ctx.dirty = true;
  confirmRouted(deployment, routedAsked, () => void (ctx.dirty = true));
  // Waiting replicas give up after a while: look again then even if nothing reports.
  return deployment.rollout?.waitingSince ? 30_000 : undefined;
}

/** Starts replicas up to the desired count, after the crash-loop backoff, while the profile is in the catalog. */
async function replaceMissing({ ctx, deployment, serving }: DeploymentPass): Promise<number | undefined> {
  const delay = replacementDelayMs(deployment.failureTimes, Date.now());
  if (delay > 0) {
    log.info(`replacing failed replicas in ${Math.round(delay / 1000)} s (${deployment.failureTimes.length} failures in the last 10 min)`);
    return delay;
  }
  if (!(await profileStillInCatalog(deployment))) return 60_000;
  for (let i = serving.length; i < deployment.desired; i++) {
    const child = await startReplica(deployment, ctx.input.continueAsNewAfterEvents);
    // A replica that ends without its final report (terminated, timed out) is noticed here.
    void child.handle.result().then(
      () => ctx.markClosed(child.replicaId, 'its workflow completed without a final report'),
      (error: unknown) => ctx.markClosed(child.replicaId, `its workflow ended: ${closeReason(error)}`),
    );
  }
  return undefined;
}

/** Stops the replicas over the desired count (all of them on undeploy). */
async function drainExtra({ deployment, serving }: DeploymentPass): Promise<undefined> {
  for (const victim of drainVictims(serving, deployment.desired)) {
    victim.stopping = true;
    await getExternalWorkflowHandle(victim.replicaId)
      .signal(stopReplicaSignal, { reason: deployment.undeploying ? 'undeploy' : `scaled to ${deployment.desired}` })
      .catch(() => undefined);
  }
  return undefined;
}
