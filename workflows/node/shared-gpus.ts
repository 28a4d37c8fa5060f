// The node workflow's rules for GPUs shared by sleepers (issue 38, docs/sleep.md "Sharing GPUs"):
// wake permits, sleeps that give a share back, and allocations restored from an agent's report.
// Pure, like state.ts, and unit-tested in test/unit/node-shared-gpus.test.ts. The invariant they
// keep: on every GPU the awake shares of its sharing holders add up to at most 1, and a holder
// that does not share holds its GPU alone.
import type { RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { Allocation, AwakeHolder, AwakeRequest, AwakeResult, NodeInventory } from '../../common/node-types.js';
import { awakeLoad, awakeShareOf, fits, isSharing, sharedGpuLoads, startedAbleToSleep } from '../../common/placement/shared-gpus.js';

interface Holding {
  allocations: Allocation[];
}

/**
 * A sharing shard's engine wakes (`awake`) only if its share fits on each of its GPUs beside the
 * awake shares there; refused, the answer names the awake replicas holding those GPUs, least
 * recently woken first, for the waking replica to ask one to sleep. Falling asleep always
 * succeeds. Either is answered again the same way (a retried Update changes nothing).
 */
export function setAwake(state: Holding, request: AwakeRequest, now: string): AwakeResult {
  const mine = state.allocations.find((a) => a.shardId === request.shardId);
  if (!mine) return { ok: false, reason: `shard ${request.shardId} holds no GPUs here`, holders: [] };
  // One that does not share holds its GPUs alone: it is always free to be awake.
  if (!isSharing(mine)) return { ok: true };
  if (!request.awake) {
    mine.asleep = true;
    return { ok: true };
  }
  if (!mine.asleep) return { ok: true };
  const others = state.allocations.filter((a) => a !== mine);
  const full = mine.gpuIndices.filter((gpu) => !fits(awakeLoad(others, gpu), mine.awakeShare!));
  if (full.length) {
    return {
      ok: false,
      reason: `GPU${full.length > 1 ? 's' : ''} ${full.join(',')} cannot hold ${request.shardId} awake (${mine.awakeShare}) beside what is awake there`,
      holders: awakeHolders(others, full),
    };
  }
  mine.asleep = false;
  mine.awakeSince = now;
  return { ok: true };
}

/** The awake sharing replicas on `gpus`, least recently woken first (then by id, so every answer agrees). */
export function awakeHolders(allocations: readonly Allocation[], gpus: readonly number[]): AwakeHolder[] {
  const byReplica = new Map<string, AwakeHolder>();
  for (const a of allocations) {
    if (!isSharing(a) || a.asleep || !a.gpuIndices.some((gpu) => gpus.includes(gpu))) continue;
    const holder = byReplica.get(a.replicaId) ?? { replicaId: a.replicaId, shardIds: [], awakeSince: a.awakeSince ?? '' };
    holder.shardIds.push(a.shardId);
    if ((a.awakeSince ?? '') < holder.awakeSince) holder.awakeSince = a.awakeSince ?? '';
    byReplica.set(a.replicaId, holder);
  }
  return [...byReplica.values()].sort((x, y) => x.awakeSince.localeCompare(y.awakeSince) || x.replicaId.localeCompare(y.replicaId));
}

/** The sharing fields of an allocation reserved for an engine that starts awake. */
export function sharingFields(share: number | undefined, now: string): Pick<Allocation, 'awakeShare' | 'asleep' | 'awakeSince'> {
  return share === undefined ? {} : { awakeShare: share, asleep: false, awakeSince: now };
}

/**
 * The sharing fields of an allocation restored from an agent's report: an engine started able to
 * sleep shares, asleep as its engine said (RunningShard.sleeping); one that does not share, not.
 */
export function restoredSharing(running: RunningShard, now: string): Pick<Allocation, 'awakeShare' | 'asleep' | 'awakeSince'> {
  const profile = running.spec?.profile;
  if (!profile || !startedAbleToSleep(profile.engine, profile.args)) return {};
  const share = awakeShareOf(profile.engine, profile.args);
  return running.sleeping === true ? { awakeShare: share, asleep: true } : { awakeShare: share, asleep: false, awakeSince: now };
}

/** Whether a restored allocation may sit beside `others` on its GPUs: only when it and every one of them shares. */
export function mayShareWith(restored: Pick<Allocation, 'awakeShare'>, others: readonly Allocation[]): boolean {
  return typeof restored.awakeShare === 'number' && others.every(isSharing);
}

/** The awake load of each usable GPU only sleepers' engines hold (placement's index), when there is one. */
export function sharedGpusOf(state: { inventory: NodeInventory | undefined; allocations: Allocation[] }): { sharedGpus?: number[] } {
  const inventory = state.inventory;
  if (!inventory) return {};
  const usable = inventory.gpus.filter((g) => inventory.managedGpus.includes(g.index) && !g.problems.length).map((g) => g.index);
  const loads = sharedGpuLoads(state.allocations, usable);
  return loads.length ? { sharedGpus: loads } : {};
}
