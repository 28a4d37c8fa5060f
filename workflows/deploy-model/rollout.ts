// Rolling a deployment to another revision, as a pure planner: given the replicas as they are,
// which to start and which to drain next. The deployment workflow carries the plan out and
// asks again whenever a replica reports. Workflow side; unit-tested in test/unit/rollout-plan.test.ts.
//
// Rules (Kubernetes' maxSurge/maxUnavailable, with llmgw's "routed, not just Ready"):
//  - At most desired + maxSurge replicas run at any moment, draining ones included (they hold GPUs).
//  - A new replica counts as available only once every router has it in its route table.
//  - Surge when there is room: start a new replica, and drain an old one only while the
//    available count stays ≥ desired − maxUnavailable.
//  - No room (a new replica is Unschedulable): drain-first, one old replica at a time, whose
//    GPUs the waiting new replica then takes. A full fleet never deadlocks.
//  - A new-revision replica that fails, or waits for capacity too long in drain-first mode,
//    rolls the deployment back to the revision it came from.
//  - Weights first: when the new revision's weights are fetched by llmgw and differ from the
//    old one's, they are fetched onto the hosts the old replicas run on (whose GPUs new replicas
//    take, and which placement prefers once they hold them) before anything is drained, so the
//    time with fewer routable replicas than desired never includes a download.
import type { ProfileSnapshot, RolloutView } from '../../common/replica-types.js';
import { revisionOfSnapshot } from '../../common/revision.js';
import type { TrackedReplica } from './state.js';
import { heldKeyOfSource } from '../../common/held-weights.js';

/** A drain-first rollout whose new replica waits longer than this for GPUs is rolled back. */
export const UNSCHEDULABLE_LIMIT_MS = 5 * 60_000;
const STEPS_KEPT = 20;

export interface RolloutState {
  from: ProfileSnapshot;
  to: ProfileSnapshot;
  maxSurge: number;
  maxUnavailable: number;
  mode: 'surge' | 'drain-first';
  state: RolloutView['state'];
  reason: string;
  startedAt: string;
  finishedAt?: string;
  steps: string[];
  /** Since when a new-revision replica has waited for capacity. */
  waitingSince?: string;
  /** Fetching the new revision's weights onto the hosts it will use, before any drain. */
  prefetch?: RolloutPrefetch;
}

export interface RolloutPrefetch {
  state: 'Fetching' | 'Done';
  modelSource: string;
  nodes: string[];
}

export interface RolloutPlan {
  start: number;
  drain: TrackedReplica[];
  mode?: 'surge' | 'drain-first';
  complete?: boolean;
  rollback?: string;
  notes: string[];
}

export function newRollout(
  from: ProfileSnapshot,
  to: ProfileSnapshot,
  policy: { maxSurge: number; maxUnavailable: number },
  now: string,
  reason: string,
): RolloutState {
  return { from, to, ...policy, mode: 'surge', state: 'RollingOut', reason, startedAt: now, steps: [`${now.slice(11, 19)} ${reason}`] };
}

export function isActive(rollout: RolloutState | undefined): boolean {
  return rollout?.state === 'RollingOut' || rollout?.state === 'RollingBack';
}

/** Records a step; the same words twice in a row are one step. */
export function note(rollout: RolloutState, now: string, text: string): void {
  if (rollout.steps[rollout.steps.length - 1]?.slice(9) === text) return;
  rollout.steps = [...rollout.steps, `${now.slice(11, 19)} ${text}`].slice(-STEPS_KEPT);
}

/** Available: Ready, not draining, and (for replicas this rollout started) routed. */
function available(r: TrackedReplica): boolean {
  return r.phase === 'Ready' && !r.stopping && r.routed !== false;
}

export function planRollout(rollout: RolloutState, replicas: TrackedReplica[], desired: number, nowMs: number): RolloutPlan {
  const target = revisionOfSnapshot(rollout.to);
  const plan: RolloutPlan = { start: 0, drain: [], notes: [] };
  const running = replicas.filter((r) => r.phase !== 'Stopped' && r.phase !== 'Failed');
  const isNew = (r: TrackedReplica): boolean => r.revision === target;
  const fresh = running.filter((r) => isNew(r) && !r.stopping);
  const old = running.filter((r) => !isNew(r) && !r.stopping);

  const failed = replicas.find((r) => isNew(r) && r.phase === 'Failed' && r.since >= rollout.startedAt);
  if (failed) {
    plan.rollback = `${failed.replicaId} of revision ${target} failed: ${failed.reason}`;
    return plan;
  }
  // A new replica that already restarted is failing, not waiting for room: hold everything
  // (no drain, no start) until it is Ready or has failed for good, which rolls back.
  const failing = fresh.find((r) => r.restarts > 0 && !available(r));
  if (failing) {
    plan.notes.push(`holding: ${failing.replicaId} is restarting; the rollout waits for it to be Ready or to fail`);
    return plan;
  }
  const waiting = fresh.find((r) => r.phase === 'Unschedulable');
  if (waiting && rollout.mode === 'surge') {
    plan.mode = 'drain-first';
    plan.notes.push(`no room for a surge replica (${waiting.reason}): draining one old replica at a time`);
  }
  if (waiting && rollout.waitingSince && nowMs - Date.parse(rollout.waitingSince) > UNSCHEDULABLE_LIMIT_MS) {
    plan.rollback = `${waiting.replicaId} of revision ${target} waited for GPUs for more than ${UNSCHEDULABLE_LIMIT_MS / 60_000} min: ${waiting.reason}`;
    return plan;
  }

  const freshRouted = fresh.filter(available).length;
  const prefetching = rollout.prefetch?.state === 'Fetching';
  if (prefetching)
    plan.notes.push(`fetching ${rollout.prefetch!.modelSource} onto ${rollout.prefetch!.nodes.join(', ')} before draining anything`);
  if (!running.some((r) => !isNew(r)) && freshRouted >= desired) {
    plan.complete = true;
    return plan;
  }

  // Starts: within the surge budget, and only a few new replicas on their way at once.
  const inFlight = fresh.filter((r) => !available(r)).length;
  const budget = desired + rollout.maxSurge - running.length;
  plan.start = Math.max(0, Math.min(desired - fresh.length, budget, Math.max(1, rollout.maxSurge) - inFlight));

  // Drains: none while the weights are on their way; then old replicas that serve nothing go
  // first, whenever new ones are coming.
  if (prefetching) return plan;
  let availableNow = running.filter(available).length;
  const surplus = old.length + fresh.length + plan.start - desired;
  const idle = old.filter((r) => !available(r));
  for (const r of idle.slice(0, Math.max(0, surplus))) plan.drain.push(r);
  const draining = running.some((r) => r.stopping && !isNew(r));
  const drainFirst = (plan.mode ?? rollout.mode) === 'drain-first';
  for (const r of old.filter(available).sort((a, b) => b.seq - a.seq)) {
    if (availableNow - 1 >= desired - rollout.maxUnavailable) {
      plan.drain.push(r);
      availableNow--;
    } else if (drainFirst && waiting && !draining && !plan.drain.length && availableNow >= desired - rollout.maxUnavailable) {
      // No room: the waiting new replica takes this one's GPUs.
      plan.drain.push(r);
      break;
    } else break;
  }
  return plan;
}

/**
 * What a rollout fetches before it drains: the new revision's weights onto the hosts the old
 * replicas run on. Nothing when llmgw does not fetch the new source, or it is the old one.
 */
export function planPrefetch(rollout: RolloutState, replicas: TrackedReplica[]): RolloutPrefetch {
  const modelSource = rollout.to.modelSource;
  const target = revisionOfSnapshot(rollout.to);
  const nodes =
    heldKeyOfSource(modelSource) === undefined || modelSource === rollout.from.modelSource
      ? []
      : [
          ...new Set(
            replicas.filter((r) => r.phase !== 'Stopped' && r.phase !== 'Failed' && r.revision !== target).flatMap((r) => r.nodes),
          ),
        ].sort();
  return { state: nodes.length ? 'Fetching' : 'Done', modelSource, nodes };
}

export function rolloutView(rollout: RolloutState, replicas: TrackedReplica[], desired: number): RolloutView {
  const target = revisionOfSnapshot(rollout.to);
  return {
    from: revisionOfSnapshot(rollout.from),
    to: target,
    fromProfile: rollout.from.profile,
    toProfile: rollout.to.profile,
    mode: rollout.mode,
    state: rollout.state,
    done: replicas.filter((r) => r.revision === target && available(r)).length,
    desired,
    maxSurge: rollout.maxSurge,
    maxUnavailable: rollout.maxUnavailable,
    reason: rollout.reason,
    startedAt: rollout.startedAt,
    ...(rollout.finishedAt ? { finishedAt: rollout.finishedAt } : {}),
    steps: rollout.steps,
  };
}
