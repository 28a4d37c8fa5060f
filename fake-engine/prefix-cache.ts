// The fake engine's model of prefix caching and prefill, so that routing for cache locality can
// be measured without GPUs: prompts are cut into blocks of `blockSize` words, each block named by
// a hash chained over every block before it (as vLLM names KV blocks; the naming is the router's,
// router/kv/hashing.ts, so the two cannot drift apart), kept in an LRU of limited capacity; a
// request's prefill covers only the words after its cached leading blocks, at a fixed rate, one
// request after another. Engine side; no timers of its own.

export interface PrefillPlan {
  /** Prompt tokens found in the cache. */
  cachedTokens: number;
  /** Milliseconds from now until the prompt is prefilled (waiting for earlier prefills included). */
  prefillMs: number;
  /** Of that, the prefill's own compute (without waiting for earlier prefills). */
  computeMs: number;
}

/** Hears what the cache stores and evicts, as vLLM's KV-cache events say it (fake-engine/kv-events.ts). */
export interface CacheListener {
  /** New blocks, in prompt order; `parent` is the block before the first (null at a prompt's start). */
  stored(hashes: number[], parent: number | null): void;
  removed(hashes: number[]): void;
}

/** One engine's prefix cache and prefill queue. */
export class PrefixCache {
  /** Set by the KV-event publisher; the cache works the same without one. */
  listener: CacheListener | undefined;
  /** Block hash → when its KV is computed (performance.now() ms); Map order is LRU order. */
  private readonly blocks = new Map<number, number>();
  private prefillBusyUntil = 0;
  /** Prompt tokens looked up, and those found: vLLM's prefix_cache_queries / prefix_cache_hits. */
  queries = 0;
  hits = 0;

  constructor(
    readonly capacityBlocks: number,
    readonly blockSize: number,
    /** Prompt tokens prefilled per second; 0 prefills instantly. */
    readonly prefillTokensPerSecond: number,
  ) {}

  get size(): number {
    return this.blocks.size;
  }

  /**
   * Plans a request's prefill: the leading blocks already computed are hits, the rest queue
   * behind earlier prefills; every block of the prompt is then (re)inserted as most recent,
   * computed when this prefill ends.
   */
  admit(blocks: readonly number[], promptTokens: number, now: number): PrefillPlan {
    let hit = 0;
    while (hit < blocks.length) {
      const readyAt = this.blocks.get(blocks[hit] as number);
      if (readyAt === undefined || readyAt > now) break;
      hit++;
    }
    const cachedTokens = Math.min(promptTokens, hit * this.blockSize);
    const uncached = promptTokens - cachedTokens;
    let done = now;
    let computeMs = 0;
    if (this.prefillTokensPerSecond > 0 && uncached > 0) {
      computeMs = (uncached / this.prefillTokensPerSecond) * 1000;
      done = Math.max(now, this.prefillBusyUntil) + computeMs;
      this.prefillBusyUntil = done;
    }
    this.queries += promptTokens;
    this.hits += cachedTokens;
    if (this.capacityBlocks > 0) {
      const listener = this.listener;
      let firstNew = -1;
      for (let i = 0; i < blocks.length; i++) {
        const hash = blocks[i] as number;
        const known = this.blocks.get(hash);
        if (known === undefined && firstNew < 0) firstNew = i;
        this.blocks.delete(hash);
        // A block another request is computing is ready when that one finishes, if sooner.
        this.blocks.set(hash, i < hit ? (known as number) : Math.min(done, known ?? done));
      }
      // vLLM says a block is stored once it is allocated to a request's prompt, as here.
      if (listener !== undefined && firstNew >= 0) {
        // Hashes are chained: every block after the first new one is new too.
        listener.stored(blocks.slice(firstNew), firstNew > 0 ? (blocks[firstNew - 1] as number) : null);
      }
      // The oldest blocks go first, as in vLLM's free-block queue.
      let evicted: number[] | undefined;
      for (const hash of this.blocks.keys()) {
        if (this.blocks.size <= this.capacityBlocks) break;
        this.blocks.delete(hash);
        if (listener !== undefined) (evicted ??= []).push(hash);
      }
      if (evicted !== undefined) listener?.removed(evicted);
    }
    return { cachedTokens, prefillMs: done - now, computeMs };
  }
}
