// The blocks one engine holds, as its KV-cache events told the router: a bounded set of block
// hashes, and how far a request's own blocks run into it. Router side; kv/events.ts fills it.
//
// Bounded by count: past `capacity` hashes the oldest stored is forgotten. An engine holds at most
// its KV cache's blocks (a large GPU: about 100,000 of 16 tokens), so the bound only matters when
// removals were lost; forgetting then errs towards "not cached", which costs a prefill, never a
// wrong answer. Hashes are kept as numbers (53 bits of vLLM's 64-bit or 32-byte hashes).

/** Per replica; about 30 bytes each in a JS Set, so 8 MB at the bound. */
export const MAX_BLOCKS_PER_REPLICA = 262_144;

/** A block hash from the wire (an integer, a 64-bit integer, or vLLM's bytes) as a number. */
export function blockKey(hash: unknown): number {
  if (typeof hash === 'number') return hash;
  if (typeof hash === 'bigint') return Number(BigInt.asUintN(53, hash));
  if (hash instanceof Uint8Array) {
    let n = 0;
    for (let i = 0; i < Math.min(6, hash.length); i++) n = n * 256 + (hash[i] as number);
    return n;
  }
  return NaN;
}

export class KvIndex {
  /** Insertion order is storage order: the first is the oldest. */
  private readonly blocks = new Set<number>();

  constructor(readonly capacity = MAX_BLOCKS_PER_REPLICA) {}

  get size(): number {
    return this.blocks.size;
  }

  add(hash: number): void {
    if (Number.isNaN(hash)) return;
    this.blocks.delete(hash);
    this.blocks.add(hash);
    if (this.blocks.size > this.capacity) {
      for (const oldest of this.blocks) {
        this.blocks.delete(oldest);
        break;
      }
    }
  }

  remove(hash: number): void {
    this.blocks.delete(hash);
  }

  clear(): void {
    this.blocks.clear();
  }

  has(hash: number): boolean {
    return this.blocks.has(hash);
  }

  /** How many of `blocks`, from the first, are held: a prefix cache serves only a leading run. */
  matched(blocks: readonly number[]): number {
    let n = 0;
    while (n < blocks.length && this.blocks.has(blocks[n] as number)) n++;
    return n;
  }
}
