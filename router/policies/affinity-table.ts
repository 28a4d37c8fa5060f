// Cache-aware routing with load before locality: a request goes to the replica where it would
// start soonest, counting both the wait for a slot and the prefill of what that replica has not
// cached. Pure logic over Candidates. Router side.
//
// What is cached where comes from one of two sources. Precise: the engine publishes its KV-cache
// events (kv/events.ts) and the request's own block hashes are looked up in the index built from
// them (kv/block-index.ts). Approximate, for an engine that publishes nothing or whose stream is down:
// keys (the session: X-Session-ID, else the body's `user`; and the prompt's first kilobyte) have
// homes, the replicas their requests went to, in the order they became homes.
//
// The cost of a replica for one request, in milliseconds:
//   wait  = requests that would queue ahead of it there (its in-flight beyond the engine's
//           concurrency, or the engine's own num_requests_waiting until that is learned)
//           × the engine's time per request / its concurrency (one slot frees that often)
//         + the prefills there that this router started and that have not answered yet × the
//           engine's mean prefill per request (prefills run one after another)
//   miss  = prompt tokens not cached there × the engine's prefill time per token, twice (the
//           prefills behind it wait as long)
// both learned from the engine's own counters (engines/endpoint.ts). The cheapest wins; ties go to the
// less loaded, then to the earliest home. So a prefix stays on its home while a slot is free
// there and spreads to another replica once the queue at home costs more than a prefill there;
// that replica becomes a home too. A prompt prefix also wants as many homes as its own load
// needs (its request rate × time per request over half an engine's concurrency): short of them,
// a new replica is scored as a home (the miss is repaid by the traffic it takes); beyond them,
// the later homes count as half a home, so when load falls the prefix gathers on its first homes
// and the other copies age out. Popular prefixes are cached on several replicas on purpose. A key
// never seen goes, at equal cost, to the replica home to the fewest keys (SGLang's "smallest
// cache"), so new prefixes spread evenly.
//
// An engine that reports no load at all (no metrics page) has no queue to weigh: for it the old
// two-part imbalance guard (SGLang's and AIBrix's) still keeps a home from taking more than
// `absGap` beyond the least loaded and `relGap` times as much.
//
// Homes are per router process: with --workers N a prefix may have up to N home lists.
import { eligible, pickLeastLoaded } from './least-loaded.js';
import { DEFAULT_COSTS, type AffinityResult, type Candidate, type EngineCosts, type RequestShape } from './policy.js';

export interface ImbalanceGuard {
  /** In-flight requests beyond the least-loaded replica's before a home is skipped (engines without metrics only). */
  absGap: number;
  /** How many times the least-loaded replica's load a home must also exceed. */
  relGap: number;
}

export const DEFAULT_GUARD: ImbalanceGuard = { absGap: 8, relGap: 1.5 };

/** Keys a router remembers per model; the least recently used are forgotten past this. */
export const AFFINITY_KEYS = 100_000;

/** How much of a prompt a prefix home is taken to hold: its system prompt, not the turns after. */
const PREFIX_HOME_SHARE = 0.5;
/**
 * A miss costs its own prefill and as much again for the requests whose prefills queue behind it
 * on that engine (prefills run one after another), and it evicts something else from the cache.
 */
const MISS_WEIGHT = 2;
/** The window over which a prefix's request rate is averaged. */
const RATE_WINDOW_MS = 2000;
/** The share of an engine's concurrency one prefix may fill on each of its homes before it wants another. */
const HOME_BUSY = 0.5;
/** Costs closer than this (ms) are a tie. */
const TIE_MS = 0.01;

const NO_SHAPE: RequestShape<never> = { promptBytes: 0 };

export class AffinityTable<T extends Candidate> {
  /** Key → its homes, earliest first; Map order is LRU order. */
  private readonly homes = new Map<number, T[]>();
  /** How many keys each replica is home to: the tie-break for new keys. */
  private readonly homed = new Map<T, number>();
  /** Prefix key → its requests a second, decayed, and when it was last updated. */
  private readonly rates = new Map<number, { rate: number; at: number }>();
  /** What the last pick() did, for metrics. */
  result: AffinityResult = 'new';

  constructor(
    private readonly guard: ImbalanceGuard = DEFAULT_GUARD,
    private readonly capacity = AFFINITY_KEYS,
  ) {}

  get size(): number {
    return this.homes.size;
  }

  /** The replicas a key is cached on as far as this table knows, earliest home first. */
  homesOf(key: number): readonly T[] {
    return this.homes.get(key) ?? [];
  }

  /** The replica for a request with these keys (-1: none) among `candidates` (the model's endpoints now). */
  pick(session: number, prefix: number, candidates: readonly T[], now: number, shape: RequestShape<T> = NO_SHAPE): T | undefined {
    const sessionHomes = this.live(session, candidates);
    const prefixHomes = this.live(prefix, candidates);
    let least = Infinity;
    for (const c of candidates) if (eligible(c, undefined, now, false) && c.load() < least) least = c.load();

    // One set of costs for the model, the mean of its engines': replicas of one deployment run
    // the same engine on the same GPUs, and one engine's noisy reading must not decide alone.
    const costs = meanCosts(candidates);
    // A prompt of unknown size still costs something to miss: a home beats a stranger at equal load.
    const guessedTokens = Math.max(1, shape.promptBytes / costs.bytesPerToken);
    const precise = shape.precise;
    // Homes the prefix's own load needs: beyond them a copy is surplus (scored as half a home,
    // so the prefix's traffic gathers on its first homes and the other copies age out); short of
    // them, a stranger's miss is an investment the prefix's traffic repays, scored as a home's.
    // Until some engine's concurrency is known the load cannot be sized: every home counts fully.
    const sized = prefix >= 0 ? this.homesWanted(prefix, now, costs) : 1;
    const wanted = Number.isNaN(sized) ? prefixHomes.length : sized;
    const short = prefixHomes.length > 0 && prefixHomes.length < wanted;
    let best: T | undefined;
    let bestCost = Infinity;
    let bestRank = Infinity;
    let bestHomed = Infinity;
    let bestLoad = Infinity;
    let bestCached = false;
    for (const c of candidates) {
      if (!c.available(now)) continue;
      const load = c.load();
      // Until the engine's concurrency is learned (a scrape that found requests waiting), its
      // queue is a guess: the in-flight guard keeps a home from piling up meanwhile.
      const reports = c.queued !== undefined && (c.reportsLoad?.() ?? true);
      const known = reports && Number.isFinite(c.concurrency?.() ?? NaN);
      if (!known && this.overloaded(load, least)) continue;
      const sessionAt = sessionHomes.indexOf(c);
      const prefixAt = prefixHomes.indexOf(c);
      let cachedTokens: number;
      let promptTokens = guessedTokens;
      if (precise !== undefined && precise.live(c)) {
        promptTokens = Math.max(promptTokens, precise.blocks.length * precise.blockSize);
        cachedTokens = precise.matched(c) * precise.blockSize;
      } else if (sessionAt >= 0) cachedTokens = promptTokens;
      else if ((prefixAt >= 0 && prefixAt < wanted) || (prefixAt < 0 && short)) cachedTokens = PREFIX_HOME_SHARE * promptTokens;
      else if (prefixAt >= 0) cachedTokens = (PREFIX_HOME_SHARE / 2) * promptTokens;
      else cachedTokens = 0;
      let cost = MISS_WEIGHT * (promptTokens - cachedTokens) * costs.prefillMsPerToken;
      if (reports) {
        const queued = (c.queued as () => number)();
        if (queued > 0) {
          const slots = c.concurrency?.() ?? NaN;
          cost += (queued * costs.serviceMs) / (Number.isFinite(slots) && slots > 0 ? slots : Math.max(1, load));
        }
        // Prefills there that have not finished run before this one's (those still queued for a
        // slot are counted above).
        const prefilling = Math.max(0, (c.prefilling ?? 0) - queued);
        cost += prefilling * costs.prefillMs;
      }
      const rank = sessionAt >= 0 ? sessionAt : prefixAt >= 0 ? sessionHomes.length + prefixAt : Infinity;
      const homed = this.homed.get(c) ?? 0;
      // At equal cost the less loaded wins (prefills queue one after another on an engine), then
      // the earliest home: when load falls, the prefix's requests come back to its first home.
      const better =
        cost < bestCost - TIE_MS ||
        (cost <= bestCost + TIE_MS &&
          (load < bestLoad || (load === bestLoad && (rank < bestRank || (rank === bestRank && homed < bestHomed)))));
      if (better) {
        best = c;
        bestCost = cost;
        bestRank = rank;
        bestHomed = homed;
        bestLoad = load;
        bestCached = cachedTokens > 0;
      }
    }
    // Every candidate ejected or guarded: the balancer's own fallback uses them anyway.
    if (best === undefined) {
      this.result = 'diverted';
      return pickLeastLoaded(candidates, undefined, now);
    }
    const seen = sessionHomes.length > 0 || prefixHomes.length > 0;
    this.result = !seen && !bestCached ? 'new' : bestRank !== Infinity || bestCached ? 'home' : 'diverted';
    // The request's prompt will be cached where it runs: that replica is now a home of its keys.
    if (session >= 0) this.remember(session, best);
    if (prefix >= 0) this.remember(prefix, best);
    return best;
  }

  /**
   * How many homes a prefix's load needs: its requests a second (decayed over RATE_WINDOW_MS)
   * times the engines' time per request is how many of it run at once; each home should carry at
   * most HOME_BUSY of its engine's concurrency. NaN while no engine's concurrency is known.
   */
  private homesWanted(prefix: number, now: number, costs: ModelCosts): number {
    let state = this.rates.get(prefix);
    if (state === undefined) {
      state = { rate: 0, at: now };
      this.rates.set(prefix, state);
      if (this.rates.size > this.capacity) for (const oldest of this.rates.keys()) if (this.rates.delete(oldest)) break;
    }
    state.rate = state.rate * Math.exp(-Math.max(0, now - state.at) / RATE_WINDOW_MS) + 1000 / RATE_WINDOW_MS;
    state.at = now;
    // The rate is kept from the first request, so it is there once a concurrency is learned.
    if (!Number.isFinite(costs.slots)) return NaN;
    const concurrent = (state.rate * costs.serviceMs) / 1000;
    return Math.max(1, Math.ceil(concurrent / (costs.slots * HOME_BUSY)));
  }

  private overloaded(load: number, least: number): boolean {
    return load - least > this.guard.absGap && load > this.guard.relGap * least;
  }

  /** A key's homes that are still candidates (the others are forgotten); refreshed as recently used. */
  private live(key: number, candidates: readonly T[]): readonly T[] {
    if (key < 0) return [];
    const list = this.homes.get(key);
    if (list === undefined) return [];
    for (let i = list.length - 1; i >= 0; i--) {
      const home = list[i] as T;
      if (candidates.includes(home)) continue;
      list.splice(i, 1);
      this.uncount(home);
    }
    this.homes.delete(key);
    if (list.length === 0) return [];
    this.homes.set(key, list);
    return list;
  }

  private remember(key: number, home: T): void {
    let list = this.homes.get(key);
    if (list === undefined) {
      list = [];
      this.homes.set(key, list);
      if (this.homes.size > this.capacity) {
        for (const [oldest, homes] of this.homes) {
          this.homes.delete(oldest);
          for (const h of homes) this.uncount(h);
          break;
        }
      }
    }
    if (list.includes(home)) return;
    list.push(home);
    this.homed.set(home, (this.homed.get(home) ?? 0) + 1);
  }

  private uncount(home: T): void {
    const n = (this.homed.get(home) ?? 1) - 1;
    if (n > 0) this.homed.set(home, n);
    else this.homed.delete(home);
  }
}

/** The model's costs, and its engines' mean concurrency (NaN while none is known). */
interface ModelCosts extends EngineCosts {
  slots: number;
}

function meanCosts(candidates: readonly Candidate[]): ModelCosts {
  let n = 0;
  let bytesPerToken = 0;
  let serviceMs = 0;
  let prefillMsPerToken = 0;
  let prefillMs = 0;
  let known = 0;
  let slots = 0;
  for (const c of candidates) {
    const concurrency = c.concurrency?.() ?? NaN;
    if (Number.isFinite(concurrency)) {
      known++;
      slots += concurrency;
    }
    if (c.costs === undefined) continue;
    n++;
    bytesPerToken += c.costs.bytesPerToken;
    serviceMs += c.costs.serviceMs;
    prefillMsPerToken += c.costs.prefillMsPerToken;
    prefillMs += c.costs.prefillMs;
  }
  const mean = known === 0 ? NaN : slots / known;
  if (n === 0) return { ...DEFAULT_COSTS, slots: mean };
  return {
    bytesPerToken: bytesPerToken / n,
    serviceMs: serviceMs / n,
    prefillMsPerToken: prefillMsPerToken / n,
    prefillMs: prefillMs / n,
    slots: mean,
  };
}
