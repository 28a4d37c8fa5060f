// The host's report of what its weights cache holds: each complete revision, its size, when a
// replica last used it and which shards run it now. Sent to the node workflow (weightsHeld
// signal) only when that changes, which is a fetch, an eviction or a shard starting or
// stopping: looked at locally every few seconds, nothing reaches Temporal while it is steady.
// Agent side.
import type { RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { HeldWeights } from '../../common/node-types.js';
import { heldKeyOfSource, sourceOfHeld } from '../../common/held-weights.js';
import { heldWeightsKey } from '../../common/node-types.js';
import { runningShardIds } from '../shard-report.js';
import type { HostWeightsCache } from './host-cache.js';

const CHECK_EVERY_MS = 15_000;
const AFTER_CHANGE_MS = 500;

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

export interface WeightsReporter {
  /** Something may have changed (a fetch ended, a shard transitioned): look again shortly. */
  changed(): void;
  /** The node registered (possibly a new node workflow): tell it again. */
  registered(): void;
  close(): void;
}

export function createWeightsReporter(deps: {
  held(): HeldWeights[];
  send(weights: HeldWeights[]): Promise<void>;
  log(line: string): void;
}): WeightsReporter {
  // undefined: the node has not been told since it registered.
  let sent: string | undefined;
  let soon: NodeJS.Timeout | undefined;
  let registered = false;
  const check = (): void => {
    if (!registered) return;
    let weights: HeldWeights[];
    try {
      weights = deps.held();
    } catch (error) {
      deps.log(`could not read the weights cache: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    const key = JSON.stringify(weights);
    if (key === sent) return;
    // A node that never heard of any holding needs no empty report.
    if (sent === undefined && weights.length === 0) {
      sent = key;
      return;
    }
    const previous = sent;
    sent = key;
    deps.send(weights).catch((error: unknown) => {
      sent = previous;
      deps.log(`could not report the weights held: ${error instanceof Error ? error.message : String(error)}`);
    });
  };
  const timer = setInterval(check, CHECK_EVERY_MS);
  timer.unref();
  return {
    changed() {
      if (soon) clearTimeout(soon);
      soon = setTimeout(check, AFTER_CHANGE_MS);
      soon.unref();
    },
    registered() {
      registered = true;
      sent = undefined;
      this.changed();
    },
    close() {
      clearInterval(timer);
      if (soon) clearTimeout(soon);
    },
  };
}
