// A replica's sleep and wake (issue 38, docs/sleep.md): the sleepReplica and wakeReplica Updates,
// the sleep step (Ready → Sleeping: route withdrawn, then each engine put to sleep) and the
// asleep step, which watches its engines as Ready does and wakes them when asked. An Update only
// asks; the steps act and answer it, so the step table stays the one place the replica moves.
// Workflow side.
import { ApplicationFailure, condition, log, setHandler } from '@temporalio/workflow';
import type { ShardPlacement } from '../../common/replica-types.js';
import type { SleepRequest, WakeRequest, WakeResult } from '../../common/sleep-types.js';
import { sleepReplicaUpdate, wakeReplicaUpdate } from '../definitions.js';
import { awaitRouters } from '../routes/await.js';
import { control, sleepCalls } from './calls.js';
import type { ReplicaContext } from './context.js';
import { firstLine } from './state.js';
import type { Next } from './steps.js';
import { meaningOf } from './watch.js';
import { sleepRefusal, wakeRefusal } from './sleep-rules.js';
import { tellAsleep } from './awake-permits.js';
import { answerWake, byRank, noRoomToRestart, permitsOrWhy, wake } from './wake.js';

export type Answer = { ok: true } | { ok: false; why: string };

/** What the Updates asked and the steps have not answered yet; not carried (a hand-over waits for both). */
export interface SleepControl {
  sleep?: { request: SleepRequest; level: 1 | 2; answer?: Answer };
  /** Shared by every wakeReplica that arrives while one is under way. */
  wake?: { by: string; reason?: string; acceptedAtMs: number; answer?: Answer };
}

/** The failure type of a sleep or wake the replica could not carry out (the Update fails with it). */
const SLEEP_FAILED = 'SleepFailed';

/** Answers the sleep asked, and clears it: the next sleepReplica is a new one. */
function answerSleep(ctx: ReplicaContext, answer: Answer): void {
  const pending = ctx.sleep.sleep;
  ctx.sleep.sleep = undefined;
  if (pending) pending.answer = answer;
}

/** Registers both Updates; called before the run's first await. `opened`: the carried state was verified. */
export function registerSleepHandlers(ctx: ReplicaContext, opened: () => boolean): void {
  setHandler(
    sleepReplicaUpdate,
    async (request) => {
      const pending: NonNullable<SleepControl['sleep']> = { request, level: request.level ?? ctx.profile.sleep?.level ?? 1 };
      ctx.sleep.sleep = pending;
      await condition(() => pending.answer !== undefined);
      if (!pending.answer!.ok) throw ApplicationFailure.create({ message: pending.answer!.why, type: SLEEP_FAILED, nonRetryable: true });
      return ctx.view();
    },
    {
      validator: (request) => {
        const why = opened() ? sleepRefusal(ctx, request, Date.now()) : `${ctx.replicaId} has not verified the state it was handed yet`;
        if (why) throw new Error(why);
      },
    },
  );
  setHandler(
    wakeReplicaUpdate,
    async (request: WakeRequest): Promise<WakeResult> => {
      const acceptedAtMs = Date.now();
      if (!ctx.sleep.sleep && !ctx.sleep.wake && ctx.state.phase !== 'Sleeping') {
        return { replicaId: ctx.replicaId, wokeInMs: 0, alreadyAwake: true };
      }
      // A wake under way is shared: this one waits for it, and says how long it waited.
      const pending = (ctx.sleep.wake ??= { by: request.by, acceptedAtMs, ...(request.reason ? { reason: request.reason } : {}) });
      await condition(() => pending.answer !== undefined);
      if (!pending.answer!.ok) throw ApplicationFailure.create({ message: pending.answer!.why, type: SLEEP_FAILED, nonRetryable: true });
      return { replicaId: ctx.replicaId, wokeInMs: Date.now() - acceptedAtMs, alreadyAwake: false };
    },
    {
      validator: (request) => {
        const why = opened() ? wakeRefusal(ctx, request) : `${ctx.replicaId} has not verified the state it was handed yet`;
        if (why) throw new Error(why);
      },
    },
  );
}

/**
 * Answers what the Updates asked when the replica goes somewhere they cannot follow: a stop, an
 * end, a sleep that never started. A wake is answered once the replica serves again (after a
 * restart too). Called by the step loop before each step.
 */
export function settleSleepRequests(ctx: ReplicaContext, next: Next): void {
  const { sleep, wake } = ctx.sleep;
  const { state } = ctx;
  const ending = next.step === 'drain' || next.step === 'done';
  const why = ending
    ? `${ctx.replicaId} is stopping (${state.stopReason ?? (next.step === 'done' ? next.reason : 'stop requested')})`
    : `${ctx.replicaId} left Ready before it could sleep (${state.phase}: ${state.reason})`;
  if (sleep && (ending || next.step !== 'sleep')) answerSleep(ctx, { ok: false, why });
  if (wake && ending) answerWake(ctx, { ok: false, why });
  if (wake && next.step === 'watch') answerWake(ctx, { ok: true });
}

/**
 * The sleep step: the route goes first (routers hold new requests, and ask for a wake, rather
 * than send them to an engine falling asleep), then each rank's engine sleeps in rank order. An
 * engine that will not sleep leaves the replica Ready, the ranks already asleep woken again.
 */
export async function fallAsleep(ctx: ReplicaContext): Promise<Next> {
  const { state } = ctx;
  const pending = ctx.sleep.sleep;
  if (!pending) return { step: 'watch' };
  const { level, request } = pending;
  const asked = `level ${level}, asked by ${request.by}${request.reason ? `: ${request.reason}` : ''}`;
  state.sleep = { ...(state.sleep?.lastWake ? { lastWake: state.sleep.lastWake } : {}), since: new Date().toISOString(), level };
  // Said once, as it will be: the deployment and `llmgw status` keep the reason they are told.
  void ctx.setPhase('Sleeping', `asleep (${asked}); the next request wakes it`);
  await awaitRouters(`awaitReplicaRouted: every router holds requests for ${ctx.replicaId}`)
    .awaitReplicaRouted({ replicaId: ctx.replicaId, routed: false })
    .catch((error: unknown) => log.warn(`routers did not confirm the withdrawal: ${String(error)}`));
  const asleep: ShardPlacement[] = [];
  for (const shard of byRank(state.shards)) {
    try {
      await sleepCalls(shard.nodeId, `sleepShard rank ${shard.rank} on ${shard.nodeId}, level ${level}`).sleepShard({
        shardId: shard.shardId,
        level,
      });
      asleep.push(shard);
    } catch (error) {
      const why = `rank ${shard.rank} on ${shard.nodeId} would not sleep: ${firstLine(error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error))}`;
      for (const done of asleep) {
        await sleepCalls(done.nodeId, `wakeShard rank ${done.rank} on ${done.nodeId} (the sleep failed)`)
          .wakeShard({ shardId: done.shardId })
          .catch((wakeError: unknown) => log.warn(`wakeShard ${done.shardId} failed: ${String(wakeError)}`));
      }
      state.sleep = state.sleep?.lastWake ? { lastWake: state.sleep.lastWake } : undefined;
      answerSleep(ctx, { ok: false, why: `${why}; the replica stays Ready` });
      return { step: 'watch' };
    }
  }
  // Only once every engine sleeps does its GPU share go back to the node (awake-permits.ts).
  await tellAsleep(ctx, asleep);
  answerSleep(ctx, { ok: true });
  return { step: 'asleep' };
}

/**
 * The asleep step: nothing polls. It waits for a wake, a stop, an engine or node event (read as
 * Ready reads them), a hand-over, and, with the profile's `stopAfterSeconds`, one timer.
 */
export async function stayAsleep(ctx: ReplicaContext): Promise<Next> {
  const { state, events } = ctx;
  for (;;) {
    const stopInMs = stopDueInMs(ctx);
    const due = (): boolean => ctx.sleep.wake !== undefined || events.length > 0 || ctx.stopRequested() || ctx.handOverDue();
    const woken = stopInMs === undefined ? (await condition(due), true) : await condition(due, Math.max(1, stopInMs));
    if (ctx.stopRequested()) return { step: 'drain' };
    if (ctx.sleep.wake) return wake(ctx);
    if (!woken) {
      await askToStop(ctx);
      continue;
    }
    const event = events.shift();
    if (!event) return { step: 'handOver', resume: { step: 'asleep' } };
    const meaning = meaningOf(ctx, event);
    // A sleeping engine that fails is recovered as an awake one: restarted, then Ready.
    if (meaning?.kind === 'failure') {
      // Restarted, its engines start awake: on a shared GPU they need the room first. Without
      // it they are not restarted there (the node would count them asleep while they run
      // awake): the replica is placed again, where a reserve checks the room.
      const refused = await permitsOrWhy(ctx);
      state.sleep = state.sleep?.lastWake ? { lastWake: state.sleep.lastWake } : undefined;
      if (refused) return { step: 'recover', failure: noRoomToRestart(ctx, meaning.outcome.reason, refused) };
      return { step: 'recover', failure: meaning.outcome };
    }
    // Not Unknown: that phase is routable, and a sleeping engine serves nothing.
    if (meaning?.kind === 'unreachable')
      void ctx.setPhase('Sleeping', `asleep; agent on ${meaning.nodeId} unreachable (${meaning.reason})`);
    else if (meaning?.kind === 'back') void ctx.setPhase('Sleeping', `asleep; agent on ${meaning.nodeId} is back`);
  }
}

/** Milliseconds until this sleep asks its deployment to stop it; undefined: no timer. */
function stopDueInMs(ctx: ReplicaContext): number | undefined {
  const stopAfter = ctx.profile.sleep?.stopAfterSeconds;
  const since = ctx.state.sleep?.since;
  if (stopAfter === undefined || !since || ctx.state.sleep?.stopAskedAt) return undefined;
  return Date.parse(since) + stopAfter * 1000 - Date.now();
}

/**
 * Asleep for `stopAfterSeconds`: asks the deployment for one replica fewer (its autoscale
 * Update), once per sleep. The deployment stops the replica that has slept longest (its
 * drainVictims); one that is not autoscaled, or at its minimum, keeps it asleep.
 */
async function askToStop(ctx: ReplicaContext): Promise<void> {
  const sleep = ctx.state.sleep!;
  sleep.stopAskedAt = new Date().toISOString();
  const seconds = ctx.profile.sleep?.stopAfterSeconds ?? 0;
  const result = await control(`ask ${ctx.input.deployment} for one replica fewer: asleep ${seconds} s`)
    .askToStopSleeper({ deployment: ctx.input.deployment, replicaId: ctx.replicaId, asleepSeconds: seconds })
    .catch((error: unknown) => ({ asked: false, why: String(error) }));
  const then = result.asked ? 'its deployment was asked for one replica fewer' : `it stays asleep: ${result.why}`;
  void ctx.setPhase('Sleeping', `asleep ${seconds} s (stopAfterSeconds); ${then}`, { quiet: true });
}

/**
 * Whether the engines a reconciliation hands this replica sleep (their agent reads the engine's
 * own word: vLLM's /is_sleeping): then the replica is Sleeping at once. Asked only of a profile
 * with a sleep policy; an agent that cannot answer (an older one) counts as awake.
 */
export async function adoptedAsleep(ctx: ReplicaContext): Promise<boolean> {
  const leader = ctx.state.shards.find((s) => s.rank === 0);
  if (!ctx.profile.sleep || !leader) return false;
  const answer = await sleepCalls(leader.nodeId, `shardSleepState rank 0 on ${leader.nodeId}`, { once: true })
    .shardSleepState({ shardId: leader.shardId })
    .catch(() => undefined);
  if (!answer?.sleeping) return false;
  const level = answer.level ?? ctx.profile.sleep.level;
  ctx.state.sleep = { since: new Date().toISOString(), level };
  // The node may count it awake (a claim made before the engine fell asleep): its share goes back.
  await tellAsleep(ctx, byRank(ctx.state.shards));
  void ctx.setPhase('Sleeping', `adopted asleep (level ${level}); the next request wakes it`);
  return true;
}
