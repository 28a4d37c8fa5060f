// When a replica refuses a sleepReplica or wakeReplica Update, and why in words an operator (or a
// router) can act on. Pure: the Updates' validators call them, so a refusal costs no event.
// Workflow side; unit-tested in test/unit/replica-sleep-rules.test.ts.
import type { SleepRequest, WakeRequest } from '../../common/sleep-types.js';
import { COMING_UP_PHASES } from '../../common/replica-types.js';
import type { ReplicaContext } from './context.js';

type Asking = Pick<ReplicaContext, 'replicaId' | 'profile' | 'state' | 'sleep' | 'stopRequested' | 'handOverDue'>;

/** Why `request` is refused now (at workflow time `nowMs`), or undefined when it may go ahead. */
export function sleepRefusal(ctx: Asking, request: SleepRequest, nowMs: number): string | undefined {
  const { state, profile, replicaId } = ctx;
  if (typeof request?.by !== 'string' || request.by === '') return 'say who asks: `by` (cli:<user>, autoscaler, router:<id>, node:<id>)';
  if (request.level !== undefined && request.level !== 1 && request.level !== 2)
    return `level must be 1 or 2, got ${String(request.level)}`;
  const policy = profile.sleep;
  if (!policy) {
    return `profile ${profile.profile} has no sleep policy (catalog \`sleep:\`): its engines were not started able to sleep; add one and roll out`;
  }
  if (ctx.stopRequested()) return `${replicaId} is stopping (${state.stopReason})`;
  if (ctx.sleep.sleep) return `${replicaId} is already falling asleep (asked by ${ctx.sleep.sleep.request.by})`;
  if (ctx.sleep.wake) return `${replicaId} is waking (asked by ${ctx.sleep.wake.by})`;
  if (state.phase === 'Sleeping')
    return `${replicaId} is asleep already (level ${state.sleep?.level ?? '?'}, since ${state.sleep?.since ?? state.since})`;
  if (state.phase !== 'Ready') return `${replicaId} is ${state.phase}, not Ready (${state.reason}): only a Ready replica is put to sleep`;
  if (ctx.handOverDue()) return `${replicaId} is handing over to a new run: ask again in a moment`;
  const lastWake = state.sleep?.lastWake;
  if (lastWake && !request.force) {
    const awakeMs = nowMs - Date.parse(lastWake.at);
    if (awakeMs < policy.minAwakeSeconds * 1000) {
      const until = new Date(Date.parse(lastWake.at) + policy.minAwakeSeconds * 1000).toISOString();
      return (
        `${replicaId} was woken ${Math.floor(awakeMs / 1000)} s ago (by ${lastWake.by}) and stays awake at least ${policy.minAwakeSeconds} s ` +
        `(minAwakeSeconds), so that models taking turns do not thrash: ask again after ${until}, or with force`
      );
    }
  }
  return undefined;
}

/** Why a wake is refused; undefined when it may go ahead (Ready and Unknown answer "already awake"). */
export function wakeRefusal(ctx: Asking, request: WakeRequest): string | undefined {
  const { state, replicaId } = ctx;
  if (typeof request?.by !== 'string' || request.by === '') return 'say who asks: `by` (cli:<user>, router:<id>, node:<id>)';
  if (ctx.stopRequested() || state.phase === 'Draining' || state.phase === 'Stopped' || state.phase === 'Failed') {
    return `${replicaId} is ${state.phase === 'Stopped' || state.phase === 'Failed' ? state.phase : 'stopping'} (${state.stopReason ?? state.reason}): its deployment starts another if it wants one`;
  }
  if (COMING_UP_PHASES.includes(state.phase) || state.phase === 'Unschedulable') {
    return `${replicaId} is ${state.phase} (${state.reason}): it serves once Ready, without a wake`;
  }
  // A hand-over waits for every Update to finish: one accepted now would wait for a wake the
  // handing-over run no longer makes.
  if (state.phase === 'Sleeping' && !ctx.sleep.wake && ctx.handOverDue())
    return `${replicaId} is handing over to a new run: ask again in a moment`;
  return undefined;
}
