// The replica's wake step (docs/sleep.md, "The replica"): room on shared GPUs first (the nodes'
// permits, awake-permits.ts), then every rank woken in rank order, and the shared wakeReplica
// answered. A wake that finds no room, or an engine that runs out of GPU memory waking, leaves
// the replica asleep with its shares given back; any other engine failure restarts it. Workflow
// side.
import { ActivityFailure, ApplicationFailure, log } from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import type { ShardPlacement } from '../../common/replica-types.js';
import { sleepCalls } from './calls.js';
import type { ReplicaContext } from './context.js';
import type { Failure } from './recovery.js';
import type { Answer } from './sleep.js';
import { failureOutcome, firstLine } from './state.js';
import type { Next } from './steps.js';
import { acquireAwake, tellAsleep } from './awake-permits.js';

export function byRank(shards: ShardPlacement[]): ShardPlacement[] {
  return [...shards].sort((a, b) => a.rank - b.rank);
}

/** Answers every wakeReplica waiting on the wake under way, and clears it. */
export function answerWake(ctx: ReplicaContext, answer: Answer): void {
  const pending = ctx.sleep.wake;
  ctx.sleep.wake = undefined;
  if (pending) pending.answer = answer;
}

/** Wakes every rank (rank 0 first) and answers the shared wake. */
export async function wake(ctx: ReplicaContext): Promise<Next> {
  const { state } = ctx;
  const pending = ctx.sleep.wake!;
  void ctx.setPhase('Sleeping', `waking (asked by ${pending.by}${pending.reason ? `: ${pending.reason}` : ''})`, { quiet: true });
  // On GPUs shared with other sleepers, each node first grants room (the LRU holder asked to sleep).
  const refused = await permitsOrWhy(ctx);
  if (refused) return failWakeAsleep(ctx, refused, `the last wake found no room: ${refused}`);
  const woken: ShardPlacement[] = [];
  for (const shard of byRank(state.shards)) {
    try {
      await sleepCalls(shard.nodeId, `wakeShard rank ${shard.rank} on ${shard.nodeId}`).wakeShard({ shardId: shard.shardId });
      woken.push(shard);
    } catch (error) {
      const where = `rank ${shard.rank} on ${shard.nodeId}`;
      // The GPU is fuller than the node's account (another process, a sleeper's leftovers): the
      // engine stays asleep, so it is put back to sleep with its ranks rather than restarted
      // onto the GPU that just proved full.
      if (isWakeOutOfMemory(error) && (await sleepAgain(ctx, woken))) {
        const why = `${where} did not fit on its GPU (${causeMessage(error)}); free memory on GPUs ${shard.gpuIndices.join(',')} of ${shard.nodeId} (\`llmgw nodes\`), then wake it again`;
        return failWakeAsleep(ctx, why, `the last wake ran out of GPU memory on ${shard.nodeId}`);
      }
      const outcome = failureOutcome(error, shard.nodeId, `waking ${where}`) as Failure;
      state.sleep = state.sleep?.lastWake ? { lastWake: state.sleep.lastWake } : undefined;
      answerWake(ctx, { ok: false, why: `${outcome.reason}; the replica restarts its engines` });
      return { step: 'recover', failure: outcome };
    }
  }
  const tookMs = Date.now() - pending.acceptedAtMs;
  state.sleep = { lastWake: { at: new Date().toISOString(), by: pending.by, tookMs } };
  answerWake(ctx, { ok: true });
  return { step: 'watch' };
}

/**
 * The wake failed and every engine sleeps: the shares any node granted go back (a permit kept by
 * a sleeper would make it the holder every other waker asks, forever), the wake is answered.
 */
async function failWakeAsleep(ctx: ReplicaContext, why: string, phaseReason: string): Promise<Next> {
  await tellAsleep(ctx, byRank(ctx.state.shards));
  answerWake(ctx, { ok: false, why: `${why}; the replica stays asleep` });
  void ctx.setPhase('Sleeping', `asleep; ${phaseReason}`, { quiet: true });
  return { step: 'asleep' };
}

/** The ranks a failed wake had already woken, put back to sleep; false if one would not go. */
async function sleepAgain(ctx: ReplicaContext, woken: ShardPlacement[]): Promise<boolean> {
  const level = ctx.state.sleep?.level ?? ctx.profile.sleep?.level ?? 1;
  for (const shard of woken) {
    try {
      await sleepCalls(shard.nodeId, `sleepShard rank ${shard.rank} on ${shard.nodeId} (the wake failed)`).sleepShard({
        shardId: shard.shardId,
        level,
      });
    } catch (error) {
      log.warn(`rank ${shard.rank} on ${shard.nodeId} would not sleep again after a failed wake: ${causeMessage(error)}`);
      return false;
    }
  }
  return true;
}

function isWakeOutOfMemory(error: unknown): boolean {
  const cause = error instanceof ActivityFailure ? error.cause : error;
  return cause instanceof ApplicationFailure && cause.type === FailureType.WakeOutOfMemory;
}

function causeMessage(error: unknown): string {
  const cause = error instanceof ActivityFailure ? error.cause : error;
  return firstLine(cause instanceof Error ? cause.message : String(cause));
}

/** Wake permits for every rank (awake-permits.ts); undefined when granted, else why not. */
export async function permitsOrWhy(ctx: ReplicaContext): Promise<string | undefined> {
  return acquireAwake(ctx, byRank(ctx.state.shards)).catch(
    (error: unknown) =>
      `the wake permits could not be asked of the nodes (${causeMessage(error)}): check that a control worker runs and the nodes are Ready (\`llmgw nodes\`)`,
  );
}

/**
 * An engine that died asleep where its GPU has no room for it awake: not restarted in place, but
 * placed again (a reserve elsewhere, or here once there is room, checks the fit).
 */
export function noRoomToRestart(ctx: ReplicaContext, reason: string, refused: string): Failure {
  const nodeId = byRank(ctx.state.shards)[0]?.nodeId ?? '';
  return { kind: 'replace', reason: `${reason}; no room on its GPUs to restart it awake (${refused})`, nodeId, agentGone: false };
}
