// A sharing replica's wake permits (docs/sleep.md, "Sharing GPUs"): before its engines wake, each
// node holding one of its shards must grant that the shard's awake share fits on its GPUs; a node
// that cannot names the awake replicas there, least recently woken first, and this replica asks
// the first to sleep, then asks again. After its engines fall asleep it gives its shares back.
// Nothing polls: each round is an answer to a call, and the only timer is the wait for a holder's
// minAwakeSeconds to pass. Workflow side.
import { log, sleep } from '@temporalio/workflow';
import type { AwakeResult } from '../../common/node-types.js';
import type { ShardPlacement } from '../../common/replica-types.js';
import { controlActivities } from '../toolkit.js';
import { control } from './calls.js';
import type { ReplicaContext } from './context.js';

/** A wake gives up making room after this long (a holder that will not sleep, a node that will not answer). */
const PERMIT_DEADLINE_MS = 5 * 60_000;
/**
 * And after this many rounds of asking. Under contention (several models taking turns on one GPU)
 * a round is often lost to another waker that took the room first, and each waits out a holder's
 * minAwakeSeconds: the deadline is the real bound, this one keeps the history bounded (a round is
 * about a dozen events).
 */
const MAX_ROUNDS = 60;
/** A holder that refused for a passing reason (it is waking, or falling asleep already) is asked again after this. */
const REFUSED_RETRY_MS = 2_000;

/** Sleeping a holder waits for its routers and its engines: longer than an ordinary control call. */
const sleepAsker = (summary: string) => controlActivities(summary, { startToCloseTimeout: '150 seconds', retry: { maximumAttempts: 2 } });

/** Whether this replica's allocations share their GPUs (a profile with a sleep policy). */
function sharing(ctx: ReplicaContext): boolean {
  return ctx.profile.sleep !== undefined;
}

/**
 * Wake permits for every shard, making room where a GPU is full. Undefined when all are granted;
 * else why not (the wake fails and the replica stays asleep). Every node is asked at once (one
 * round of calls in the usual case, where each grants); only a refusal is worked through alone.
 */
export async function acquireAwake(ctx: ReplicaContext, shards: ShardPlacement[]): Promise<string | undefined> {
  if (!sharing(ctx)) return undefined;
  const deadline = Date.now() + PERMIT_DEADLINE_MS;
  const first = await askPermits(shards, `awake permits for ${shards.length} rank(s)`);
  let askedToSleep = 0;
  for (const [i, shard] of shards.entries()) {
    let answer = first[i]!;
    // Room made for an earlier rank may be this one's too (one holder on both GPUs): ask again first.
    if (!answer.ok && askedToSleep > 0) answer = (await askPermits([shard], `awake permit for rank ${shard.rank} on ${shard.nodeId}`))[0]!;
    // Holders that refused for a reason that gives no time to ask again (loading, restarting,
    // gone): the next holder is asked instead, and they only once all others were.
    const passedOver = new Set<string>();
    for (let round = 1; !answer.ok; round++) {
      const others = answer.holders.filter((h) => h.replicaId !== ctx.replicaId);
      const holder = others.find((h) => !passedOver.has(h.replicaId)) ?? others[0];
      // No awake holder to ask (the node no longer holds this shard): nothing to make room from.
      if (!holder) return `node ${shard.nodeId} did not grant rank ${shard.rank} a wake: ${answer.reason}`;
      if (round > MAX_ROUNDS || Date.now() > deadline)
        return `node ${shard.nodeId} has no room to wake rank ${shard.rank} (${answer.reason}); ${holder.replicaId} did not make room in time`;
      const asked = await sleepAsker(`ask ${holder.replicaId} to sleep: ${ctx.replicaId} wakes on ${shard.nodeId}`).askToSleepFor({
        replicaId: holder.replicaId,
        by: `replica:${ctx.replicaId}`,
        reason: `${ctx.replicaId} wakes on GPUs ${shard.gpuIndices.join(',')} of ${shard.nodeId}, which ${holder.replicaId} holds awake (least recently woken)`,
      });
      askedToSleep++;
      if (!asked.slept && !asked.askAgainAt && others.some((h) => h.replicaId !== holder.replicaId && !passedOver.has(h.replicaId))) {
        passedOver.add(holder.replicaId);
        continue;
      }
      if (!asked.slept) {
        // Within its minAwakeSeconds: wait until they pass (bounded by the deadline), then ask again.
        const waitMs = asked.askAgainAt ? Date.parse(asked.askAgainAt) - Date.now() + 100 : REFUSED_RETRY_MS;
        if (Date.now() + waitMs > deadline) return `${holder.replicaId} stays awake (${asked.why}) past this wake's deadline`;
        log.info(`${holder.replicaId} will not sleep yet (${asked.why}): asking again in ${Math.ceil(waitMs / 1000)} s`);
        await sleep(Math.max(1, waitMs));
      }
      answer = (await askPermits([shard], `awake permit for rank ${shard.rank} on ${shard.nodeId}`))[0]!;
    }
  }
  return undefined;
}

function askPermits(shards: ShardPlacement[], summary: string): Promise<AwakeResult[]> {
  return control(summary).askAwake({ shards: shards.map(({ nodeId, shardId }) => ({ nodeId, shardId })), awake: true });
}

/** Gives each shard's awake share back once its engine sleeps; a node that does not hear keeps it awake (the safe side). */
export async function tellAsleep(ctx: ReplicaContext, shards: ShardPlacement[]): Promise<void> {
  if (!sharing(ctx)) return;
  await control(`${shards.length} rank(s) asleep: their GPU shares are free`)
    .askAwake({ shards: shards.map(({ nodeId, shardId }) => ({ nodeId, shardId })), awake: false })
    .catch((error: unknown) => log.warn(`the nodes did not all hear that ${ctx.replicaId} sleeps: ${String(error)}`));
}
