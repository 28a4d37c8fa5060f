// Where LoRA adapters go: which replica loads an adapter nobody holds, how many replicas a hot
// adapter is spread over, and how hot an adapter is. Pure over Endpoints and the router's view
// of their adapters; adapters/router.ts acts on the answers, and runs with the settings below.
// Router side.
import type { EngineAdapters } from './engines.js';
import type { Endpoint } from '../engines/endpoint.js';

/** How the adapter router (adapters/router.ts) reads engines and spreads adapters over them. */
export interface AdapterRouterOptions {
  /** How often each engine's loaded adapters are read: the bound on how stale the view gets. */
  pollMs: number;
  /** Half-life of an adapter's demand, ms: what "hot" is measured over. */
  demandHalfLifeMs: number;
  /** Replicas an adapter is loaded on grow with its share of its base's traffic times this. */
  spreadFactor: number;
  /**
   * For bench:adapters only: route by load alone, ignoring what is loaded, and load the adapter
   * wherever the request lands (the baseline adapter-aware routing is measured against).
   */
  ignoreLoaded?: boolean;
}

/**
 * Where to load: the least-loaded replica with a free slot; when every one is full, the one
 * whose least recently used adapter is the oldest (a global LRU over all the base's slots,
 * which keeps warm adapters loaded far better than evicting wherever load is lowest), with
 * load as the tie-break. Overloaded replicas (over twice the mean) are passed over while
 * another can take it.
 */
export function chooseForLoad(
  name: string,
  endpoints: readonly Endpoint[],
  viewOf: (e: Endpoint) => EngineAdapters,
  now: number,
): EngineAdapters | undefined {
  let best: EngineAdapters | undefined;
  let bestKey = Infinity;
  let mean = 0;
  for (const e of endpoints) mean += e.score() / endpoints.length;
  for (const e of endpoints) {
    const view = viewOf(e);
    if (!e.available(now) || view.pending.has(name)) continue;
    const overloaded = endpoints.length > 1 && e.score() > 2 * mean + 2 ? 1e15 : 0;
    let key: number;
    if (view.slots === 0 || view.free() > 0) key = e.score();
    else {
      const victim = view.victim();
      const age = victim === undefined ? 0 : (view.lastUsed.get(victim) ?? 0);
      key = 1e9 + age + e.score();
    }
    key += overloaded;
    if (key < bestKey) {
      bestKey = key;
      best = view;
    }
  }
  return best;
}

/**
 * Replicas an adapter with `share` of its base's traffic should be loaded on: one, plus one for
 * every 1/(replicas × factor) of the traffic. With factor 1, half the traffic on two replicas
 * wants both; a tenth on four wants one. Twice as eager thrashed slots in bench:adapters.
 */
export function replicasWanted(share: number, replicas: number, factor: number): number {
  return Math.min(replicas, 1 + Math.floor(share * replicas * factor));
}

/** Exponentially decayed request counts per adapter and per base: an adapter's share of recent traffic. */
export class DemandMeter {
  private readonly scores = new Map<string, { score: number; at: number }>();

  constructor(private readonly halfLifeMs: number) {}

  /** Counts one request for `adapter` of `base`; returns the adapter's share (0 until the base has some traffic). */
  record(adapter: string, base: string, now: number): number {
    const mine = this.bump(`a\0${adapter}`, now);
    const all = this.bump(`b\0${base}`, now);
    // A handful of requests is no evidence of heat.
    return all < 8 ? 0 : mine / all;
  }

  private bump(key: string, now: number): number {
    const d = this.scores.get(key) ?? { score: 0, at: now };
    d.score = d.score * Math.pow(2, -(now - d.at) / this.halfLifeMs) + 1;
    d.at = now;
    this.scores.set(key, d);
    return d.score;
  }
}
