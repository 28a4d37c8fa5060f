// Which replica gets a request: least outstanding work by the power of two choices, or, for a
// deployment with affinity, consistent hashing of a session id or prompt prefix with bounded
// load. Pure logic over Candidates; the router's Endpoint is one. Router side.

export type AffinityMode = 'session' | 'prefix';

/** What the balancer needs to know about a replica's endpoint. */
export interface Candidate {
  readonly url: string;
  /** Requests this router has in flight there. */
  inflight: number;
  /** Lower is better: in-flight work plus what the engine's metrics say beyond it. */
  score(): number;
  /** False while ejected for failing. */
  available(now: number): boolean;
}

function eligible(c: Candidate, tried: readonly Candidate[] | undefined, now: number, ignoreHealth: boolean): boolean {
  return (ignoreHealth || c.available(now)) && (tried === undefined || !tried.includes(c));
}

/**
 * Power of two choices over the candidates not yet tried for this request: two at random, the
 * lower score wins. It avoids the herd that "always the least loaded" causes when scores are a
 * second stale, at the cost of a scan only when some candidates are ruled out. When every
 * untried candidate is ejected they are used anyway: an ejection is a guess, and refusing the
 * request outright would make the router the reason it failed.
 */
export function pickLeastLoaded<T extends Candidate>(
  candidates: readonly T[],
  tried: readonly T[] | undefined,
  now: number,
  random: () => number = Math.random,
): T | undefined {
  let pool: readonly T[] = candidates;
  let allEligible = true;
  for (const c of candidates) {
    if (!eligible(c, tried, now, false)) {
      allEligible = false;
      break;
    }
  }
  if (!allEligible) {
    pool = candidates.filter((c) => eligible(c, tried, now, false));
    if (pool.length === 0) pool = candidates.filter((c) => eligible(c, tried, now, true));
  }
  const n = pool.length;
  if (n === 0) return undefined;
  if (n === 1) return pool[0];
  const i = Math.floor(random() * n);
  let j = Math.floor(random() * (n - 1));
  if (j >= i) j++;
  const a = pool[i] as T;
  const b = pool[j] as T;
  const sa = a.score();
  const sb = b.score();
  // Ties go to the first drawn, which is itself random, so idle replicas share the work.
  return sb < sa ? b : a;
}

/** FNV-1a over the first `limit` UTF-16 units, finished with murmur3's mixer for an even spread. */
export function hashText(text: string, limit = text.length): number {
  let h = 0x811c9dc5;
  const n = Math.min(limit, text.length);
  for (let i = 0; i < n; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

const VNODES = 64;
/** How far above the mean an endpoint may be loaded before a key moves on (Mirrokni et al.). */
export const BOUNDED_LOAD_FACTOR = 1.25;

/**
 * Consistent hashing with bounded load: a key goes to the first endpoint clockwise from its
 * hash whose in-flight count stays within BOUNDED_LOAD_FACTOR of the mean. Sessions keep their
 * replica (and its KV cache) while it is not overloaded, and when an endpoint joins or leaves
 * only the keys on its arcs move.
 */
export class HashRing<T extends Candidate> {
  private readonly points: Uint32Array;
  private readonly owners: T[];

  constructor(readonly members: readonly T[]) {
    const pairs: Array<[number, T]> = [];
    for (const member of members) {
      for (let v = 0; v < VNODES; v++) pairs.push([hashText(`${member.url}#${v}`), member]);
    }
    pairs.sort((x, y) => x[0] - y[0]);
    this.points = Uint32Array.from(pairs, (p) => p[0]);
    this.owners = pairs.map((p) => p[1]);
  }

  pick(key: number, tried: readonly T[] | undefined, now: number): T | undefined {
    const n = this.members.length;
    if (n === 0) return undefined;
    let total = 0;
    for (const m of this.members) total += m.inflight;
    const bound = Math.ceil((BOUNDED_LOAD_FACTOR * (total + 1)) / n);
    const start = this.lowerBound(key);
    const count = this.points.length;
    for (let k = 0; k < count; k++) {
      const owner = this.owners[(start + k) % count] as T;
      if (owner.inflight + 1 <= bound && eligible(owner, tried, now, false)) return owner;
    }
    // Every endpoint is ejected, tried or over the bound: fall back to the least loaded.
    return pickLeastLoaded(this.members, tried, now);
  }

  private lowerBound(key: number): number {
    let lo = 0;
    let hi = this.points.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.points[mid] as number) < key) lo = mid + 1;
      else hi = mid;
    }
    return lo === this.points.length ? 0 : lo;
  }
}

/**
 * `deployment:session|prefix,...` (LLMGW_ROUTER_AFFINITY or --affinity) as a map from deployment
 * or served name to its mode. Throws naming the part that is wrong.
 */
export function parseAffinity(spec: string | undefined): Map<string, AffinityMode> {
  const out = new Map<string, AffinityMode>();
  if (!spec) return out;
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    if (part === '') continue;
    const colon = part.lastIndexOf(':');
    const name = part.slice(0, colon).trim();
    const mode = part.slice(colon + 1).trim();
    if (colon <= 0 || name === '') throw new Error(`affinity "${part}" must be DEPLOYMENT:session or DEPLOYMENT:prefix`);
    if (mode !== 'session' && mode !== 'prefix') {
      throw new Error(`affinity "${part}": mode must be session or prefix, not "${mode}"`);
    }
    out.set(name, mode);
  }
  return out;
}
