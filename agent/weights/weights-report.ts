// The host's report of what its weights cache holds: each complete revision, its size, when a
// replica last used it and which shards run it now. Sent to the node workflow (weightsHeld
// signal) only when that changes, which is a fetch, an eviction or a shard starting or
// stopping: looked at locally every few seconds, nothing reaches Temporal while it is steady
// (sent by host/node-signals.ts through host/change-report.ts). Agent side.
import type { RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { HeldWeights } from '../../common/node-types.js';
import { heldKeyOfSource, sourceOfHeld } from '../../common/held-weights.js';
import { heldWeightsKey } from '../../common/node-types.js';
import { runningShardIds } from '../host/running-shards-report.js';
import type { HostWeightsCache } from './host-cache.js';

/** What the cache holds now, with the shards (those whose engines run) that use each revision. */
export function heldWeightsOf(cache: Pick<HostWeightsCache, 'list'>, shards: RunningShard[]): HeldWeights[] {
  const running = new Set(runningShardIds(shards));
  const users = new Map<string, string[]>();
  for (const shard of shards) {
    const key = shard.spec?.profile?.modelSource ? heldKeyOfSource(shard.spec.profile.modelSource) : undefined;
    if (key === undefined || !running.has(shard.spec!.shardId)) continue;
    users.set(key, [...(users.get(key) ?? []), shard.spec!.shardId].sort());
  }
  return cache
    .list()
    .map((held) => ({
      source: sourceOfHeld(held.repo, held.commit),
      repo: held.repo,
      commit: held.commit,
      bytes: held.bytes,
      lastUsedAt: new Date(held.lastUsedAt).toISOString(),
      inUseBy: users.get(heldWeightsKey(held.repo, held.commit)) ?? [],
    }))
    .sort((a, b) => a.source.localeCompare(b.source));
}

/** What the report compares: equal keys need no signal. */
export function heldKey(weights: HeldWeights[]): string {
  return JSON.stringify(weights);
}
