// The fake engine's model of prefix caching and prefill, so that routing for cache locality can
// be measured without GPUs: prompts are cut into blocks of `blockSize` words, each block named by
// a hash chained over every block before it (as vLLM names KV blocks), kept in an LRU of limited
// capacity; a request's prefill covers only the words after its cached leading blocks, at a
// fixed rate, one request after another. Engine side; no timers of its own.
import { HASH_START } from './text.js';

/** Chained hashes of a prompt's full blocks, fed piece by piece (a role, a message's text). */
export class BlockHasher {
  readonly blocks: number[] = [];
  private chain = HASH_START;
  private block = HASH_START;
  private wordsInBlock = 0;

  constructor(private readonly blockSize: number) {}

  /** Adds the words of one piece; a piece's end ends its last word. */
  feed(text: string): void {
    let inWord = false;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c === 32 || (c >= 9 && c <= 13)) {
        if (inWord) this.endWord();
        inWord = false;
      } else {
        this.block = Math.imul(this.block ^ c, 0x01000193);
        inWord = true;
      }
    }
    if (inWord) this.endWord();
    // A piece boundary is part of the text: ["ab","c"] and ["a","bc"] differ.
    this.block = Math.imul(this.block ^ 0x1e, 0x01000193);
  }

  private endWord(): void {
    this.block = Math.imul(this.block ^ 0x20, 0x01000193);
    if (++this.wordsInBlock < this.blockSize) return;
    this.chain = Math.imul(this.chain ^ (this.block >>> 0), 0x01000193) >>> 0;
    this.chain = Math.imul(this.chain ^ (this.chain >>> 15), 0x2c1b3c6d) >>> 0;
    this.blocks.push(this.chain);
    this.block = HASH_START;
    this.wordsInBlock = 0;
  }
}

export interface PrefillPlan {
  /** Prompt tokens found in the cache. */
  cachedTokens: number;
  /** Milliseconds from now until the prompt is prefilled (waiting for earlier prefills included). */
  prefillMs: number;
}

/** One engine's prefix cache and prefill queue. */
export class PrefixCache {
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
    if (this.prefillTokensPerSecond > 0 && uncached > 0) {
      done = Math.max(now, this.prefillBusyUntil) + (uncached / this.prefillTokensPerSecond) * 1000;
      this.prefillBusyUntil = done;
    }
    this.queries += promptTokens;
    this.hits += cachedTokens;
    if (this.capacityBlocks > 0) {
      for (let i = 0; i < blocks.length; i++) {
        const hash = blocks[i] as number;
        const known = this.blocks.get(hash);
        this.blocks.delete(hash);
        // A block another request is computing is ready when that one finishes, if sooner.
        this.blocks.set(hash, i < hit ? (known as number) : Math.min(done, known ?? done));
      }
      // The oldest blocks go first, as in vLLM's free-block queue.
      for (const hash of this.blocks.keys()) {
        if (this.blocks.size <= this.capacityBlocks) break;
        this.blocks.delete(hash);
      }
    }
    return { cachedTokens, prefillMs: done - now };
  }
}
