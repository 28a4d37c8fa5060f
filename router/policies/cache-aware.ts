// Cache-aware routing as a policy: the model's affinity table (affinity-table.ts) picks with the
// request's keys, its prompt's size and, where an engine publishes its KV-cache events, the
// request's own blocks; the outcome (home, diverted, new) is counted for the model.
import type { Endpoint } from '../engines/endpoint.js';
import { promptBlocks } from '../kv/hashing.js';
import type { AffinityResult, CachedBlocks, PickRequest, RequestShape, RoutingPolicy } from './policy.js';

/** What this policy asks of its model's affinity table (affinity-table.ts): a pick, and how it went. */
export interface AffinityPicker<T> {
  pick(session: number, prefix: number, candidates: readonly T[], now: number, shape?: RequestShape<T>): T | undefined;
  readonly result: AffinityResult;
}

export function cacheAware(table: AffinityPicker<Endpoint>, counted: (result: AffinityResult) => void): RoutingPolicy<Endpoint> {
  return {
    name: 'cache-aware',
    pick(candidates: readonly Endpoint[], request: PickRequest, now: number): Endpoint | undefined {
      const { body } = request;
      const shape: RequestShape<Endpoint> = { promptBytes: body === undefined ? 0 : body.length };
      if (body !== undefined) shape.precise = cachedBlocks(candidates, body, now);
      const chosen = table.pick(request.session, request.prefix, candidates, now, shape);
      // Blocks it does not hold yet will be stored there: their events are due.
      if (chosen?.kv !== undefined && shape.precise !== undefined && shape.precise.matched(chosen) < shape.precise.blocks.length)
        chosen.kv.expectEvents(now);
      counted(table.result);
      return chosen;
    },
  };
}

/** The request's blocks in the engines' naming, when some endpoint's KV events are live (the body is parsed only then). */
function cachedBlocks(candidates: readonly Endpoint[], body: Buffer, now: number): CachedBlocks<Endpoint> | undefined {
  let blockSize = 0;
  for (const e of candidates) if (e.kv !== undefined && e.kv.live(now)) blockSize = e.kv.blockSize;
  if (blockSize === 0) return undefined;
  const blocks = promptBlocks(body, blockSize);
  if (blocks === undefined) return undefined;
  return {
    blocks,
    blockSize,
    live: (c) => c.kv?.live(now) ?? false,
    matched: (c) => c.kv?.index.matched(blocks) ?? 0,
  };
}
