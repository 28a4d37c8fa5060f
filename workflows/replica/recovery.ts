// What a replica does when a step fails: the restart / re-place / give-up policy as one pure
// function (planRecovery, unit-tested in test/unit/replica-recovery.test.ts), and the recover
// step that carries it out. Workflow side.
import { condition } from '@temporalio/workflow';
import { releaseShards, stopShards } from './drain.js';
import type { ReplicaContext } from './context.js';
import type { ReplicaState, Outcome } from './state.js';
import type { Next } from './steps.js';

/** A failed step's outcome: anything but a stop. */
export type Failure = Exclude<Outcome, { kind: 'stop' }>;

export const RECOVERY_LIMITS = {
  /** Restarts on the same GPUs before the replica is placed elsewhere. */
  restartsPerPlacement: 2,
  /** Placements abandoned for engine failures (the first included) before the replica gives up. */
  maxFailedPlacements: 2,
  /** The first restart waits this long; each further one twice as long. */
  firstBackoffMs: 2_000,
};

export type Recovery =
  /** Can never succeed as given (an agent refused the revision): give the GPUs back and fail. */
  | { kind: 'fail'; reason: string }
  /** Restart the engines on the same GPUs after a backoff. */
  | { kind: 'restart'; restartsHere: number; backoffMs: number; reason: string }
  /**
   * Give the GPUs back and place elsewhere, avoiding the node; or give up as Failed. `nodeLost`:
   * its node workflow declared it Lost (its GPUs are already released).
   */
  | {
      kind: 'replace';
      failedNode: string;
      agentGone: boolean;
      nodeLost: boolean;
      countsAsFailure: boolean;
      giveUp: boolean;
      reason: string;
    };

/**
 * Engine failures restart on the same GPUs with backoff, then re-place avoiding the node, then
 * give up (the deployment replaces the replica, with its own backoff). A host that vanished is
 * not the engine's fault: it re-places at once and never counts towards giving up.
 */
export function planRecovery(
  state: Pick<ReplicaState, 'restartsHere' | 'failedPlacements' | 'shards'>,
  failure: Failure,
  limits = RECOVERY_LIMITS,
): Recovery {
  if (failure.kind === 'fail') return { kind: 'fail', reason: failure.reason };
  if (failure.kind === 'restart' && state.restartsHere < limits.restartsPerPlacement) {
    const restartsHere = state.restartsHere + 1;
    return { kind: 'restart', restartsHere, backoffMs: limits.firstBackoffMs * 2 ** (restartsHere - 1), reason: failure.reason };
  }
  const countsAsFailure = failure.kind !== 'replace';
  return {
    kind: 'replace',
    failedNode: failure.kind === 'replace' ? failure.nodeId : (state.shards[0]?.nodeId ?? ''),
    agentGone: failure.kind === 'replace' && failure.agentGone,
    nodeLost: failure.kind === 'replace' && failure.nodeLost === true,
    countsAsFailure,
    giveUp: state.failedPlacements + (countsAsFailure ? 1 : 0) >= limits.maxFailedPlacements,
    reason: failure.reason,
  };
}

/** The recover step: carries out planRecovery's decision. */
export async function recover(ctx: ReplicaContext, next: Extract<Next, { step: 'recover' }>): Promise<Next> {
  const { state } = ctx;
  const plan = planRecovery(state, next.failure);
  if (plan.kind === 'fail') {
    // Nothing was started (the agent refused before spawning): give the GPUs back and say why.
    return { step: 'release', reason: plan.reason, phase: 'Placing', then: { step: 'done', phase: 'Failed', reason: plan.reason } };
  }
  state.restarts++;
  if (plan.kind === 'restart') {
    state.restartsHere = plan.restartsHere;
    void ctx.setPhase(
      'Starting',
      `${plan.reason}; restarting on the same GPUs in ${plan.backoffMs / 1000} s (restart ${plan.restartsHere} of ${RECOVERY_LIMITS.restartsPerPlacement})`,
    );
    // The engines stop; the GPUs stay this replica's for the restart.
    await stopShards(ctx, `restart: ${plan.reason}`, state.shards);
    await condition(ctx.stopRequested, plan.backoffMs);
    return { step: 'start' };
  }
  if (plan.agentGone) {
    // It may only have been slow: one quick try to stop what runs there. If the agent is really
    // gone, its shards keep their GPUs until the node turns Lost, and the engines are stopped by
    // reconciliation when it returns. Not on a node already Lost: it was unreachable for its whole
    // grace, and across a partition the stop is handed to a poller that never hears it, costing
    // a heartbeat timeout (20 s) before the replica may be placed elsewhere.
    const there = state.shards.filter((s) => s.nodeId === plan.failedNode);
    if (!plan.nodeLost) {
      const unconfirmed = await stopShards(ctx, `re-placing: ${plan.reason}`, there, { quick: true });
      await releaseShards(there.filter((s) => !unconfirmed.includes(s.shardId)));
    }
    state.shards = state.shards.filter((s) => s.nodeId !== plan.failedNode);
  }
  if (plan.failedNode && !state.avoidNodes.includes(plan.failedNode)) state.avoidNodes.push(plan.failedNode);
  if (plan.countsAsFailure) state.failedPlacements++;
  const then: Next = plan.giveUp
    ? {
        step: 'done',
        phase: 'Failed',
        reason: `gave up after ${state.failedPlacements} placements and ${state.restarts} restarts: ${plan.reason}`,
      }
    : { step: 'place', reason: `${plan.reason}; placing elsewhere (avoiding ${state.avoidNodes.join(', ')})` };
  return { step: 'release', reason: `re-placing: ${plan.reason}`, phase: 'Placing', then };
}
