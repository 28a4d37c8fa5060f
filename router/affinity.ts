// Cache-aware routing: a request goes where its KV cache most likely is, unless that replica is
// much busier than the least-loaded one. Pure logic over Candidates. Router side.
//
// The cache is followed by key: the session (X-Session-ID, else the body's `user`) and the
// prompt's first kilobyte (a system prompt, a conversation's start). A key seen before has a
// home, the replica its first request went to; a key never seen goes to the replica home to the
// fewest keys among those the guard below would not skip, and that becomes its home. So shared
// prefixes spread evenly over the replicas' caches when they first appear and then stay put, and
// prompts that share nothing spread evenly too. A new session starts on its prompt prefix's home when it has one, so
// conversations that share a system prompt share its cache too.
//
// The imbalance guard is SGLang's and AIBrix's two-part test, applied to the chosen home: it is
// skipped for the least-loaded replica when it holds more than `absGap` requests beyond it AND
// more than `relGap` times as many. Both parts matter: the absolute gap alone would move work off
// a replica that is busy only in proportion; the relative one alone would move it at 2 vs 1. A
// diverted request leaves the home as it is (the cache is still there once the burst is over).
//
// Homes are per router process: with --workers N a prefix may have up to N homes, one per
// process, each taking its share of the prefix's traffic.
import { eligible, pickLeastLoaded, type Candidate } from './balancer.js';

export interface ImbalanceGuard {
  /** In-flight requests beyond the least-loaded replica's before a home is skipped. */
  absGap: number;
  /** How many times the least-loaded replica's load a home must also exceed. */
  relGap: number;
}

export const DEFAULT_GUARD: ImbalanceGuard = { absGap: 8, relGap: 1.5 };

/** How a request was placed: on a key's home, on the least-loaded replica instead of an overloaded home, or as a new key. */
export type AffinityResult = 'home' | 'diverted' | 'new';

/** Keys a router remembers per model; the least recently used are forgotten past this. */
export const AFFINITY_KEYS = 100_000;

export class AffinityTable<T extends Candidate> {
  private readonly homes = new Map<number, T>();
  /** How many keys each replica is home to: the tie-break for new keys, as SGLang routes a new prefix to the smallest cache. */
  private readonly homed = new Map<T, number>();
  /** What the last pick() did, for metrics. */
  result: AffinityResult = 'new';

  constructor(
    private readonly guard: ImbalanceGuard = DEFAULT_GUARD,
    private readonly capacity = AFFINITY_KEYS,
  ) {}

  get size(): number {
    return this.homes.size;
  }

  /**
   * The replica for a request with these keys (-1: none) among `candidates` (the model's
   * endpoints now). An endpoint that left the table is no longer anybody's home.
   */
  pick(session: number, prefix: number, candidates: readonly T[], now: number): T | undefined {
    const sessionHome = this.home(session, candidates, now);
    const prefixHome = sessionHome === undefined ? this.home(prefix, candidates, now) : undefined;
    const home = sessionHome ?? prefixHome;
    if (home !== undefined) {
      let least = Infinity;
      for (const c of candidates) if (eligible(c, undefined, now, false) && c.load() < least) least = c.load();
      if (this.overloaded(home.load(), least)) {
        this.result = 'diverted';
        return pickLeastLoaded(candidates, undefined, now);
      }
      this.result = 'home';
      // A session seen for the first time follows its prefix, and stays there.
      if (session >= 0 && sessionHome === undefined) this.remember(session, home);
      return home;
    }
    this.result = 'new';
    const chosen = this.forNewKey(candidates, now);
    if (chosen !== undefined) {
      if (session >= 0 && !this.homes.has(session)) this.remember(session, chosen);
      if (prefix >= 0 && !this.homes.has(prefix)) this.remember(prefix, chosen);
    }
    return chosen;
  }

  /**
   * Where a new key goes: of the candidates in rotation that the guard would not skip, the one
   * home to the fewest keys (ties: the less loaded), as SGLang sends a new prefix to the worker
   * with the smallest cache. Keys count a replica's share of distinct sessions and prefixes, so
   * new ones even out what each cache holds; load decides only through the guard, since the
   * in-flight count of the moment says little about how much a new prefix will bring.
   */
  private forNewKey(candidates: readonly T[], now: number): T | undefined {
    let least = Infinity;
    for (const c of candidates) if (c.available(now) && c.load() < least) least = c.load();
    let best: T | undefined;
    let bestHomed = Infinity;
    let bestLoad = Infinity;
    for (const c of candidates) {
      if (!c.available(now)) continue;
      const load = c.load();
      if (this.overloaded(load, least)) continue;
      const homed = this.homed.get(c) ?? 0;
      if (homed < bestHomed || (homed === bestHomed && load < bestLoad)) {
        best = c;
        bestHomed = homed;
        bestLoad = load;
      }
    }
    // Every candidate ejected: the balancer's own fallback uses them anyway.
    return best ?? pickLeastLoaded(candidates, undefined, now);
  }

  private overloaded(load: number, least: number): boolean {
    return load - least > this.guard.absGap && load > this.guard.relGap * least;
  }

  /** The key's home when it is still a candidate and in rotation; refreshed as recently used. */
  private home(key: number, candidates: readonly T[], now: number): T | undefined {
    if (key < 0) return undefined;
    const home = this.homes.get(key);
    if (home === undefined) return undefined;
    if (!candidates.includes(home)) {
      this.forget(key, home);
      return undefined;
    }
    if (!home.available(now)) return undefined;
    this.homes.delete(key);
    this.homes.set(key, home);
    return home;
  }

  private remember(key: number, home: T): void {
    const previous = this.homes.get(key);
    if (previous !== undefined) this.forget(key, previous);
    this.homes.set(key, home);
    this.homed.set(home, (this.homed.get(home) ?? 0) + 1);
    if (this.homes.size > this.capacity) {
      for (const [oldest, where] of this.homes) {
        this.forget(oldest, where);
        break;
      }
    }
  }

  private forget(key: number, home: T): void {
    this.homes.delete(key);
    const n = (this.homed.get(home) ?? 1) - 1;
    if (n > 0) this.homed.set(home, n);
    else this.homed.delete(home);
  }
}
