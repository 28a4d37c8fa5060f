// LoRA adapters at the router: a request whose `model` is an adapter goes to a replica of its
// base that has it loaded (cache-aware among those, as for any model); when none has, the
// least-loaded replica loads it while the request is held, unloading its least recently used
// adapter when its slots are full; a hot adapter is loaded on more replicas in the background.
// The engines are the truth about what is loaded (read every `pollMs`), the catalog about
// what may be (an adapter it no longer lists is unloaded everywhere). Router side.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { AffinityTable, DEFAULT_GUARD } from './affinity.js';
import { AdapterLoadError, EngineAdapters, loadAdapter, readEngineAdapters, unloadAdapter } from './adapter-engines.js';
import { pickLeastLoaded } from './balancer.js';
import type { Endpoint } from './endpoint.js';
import type { ModelMetrics } from './metrics.js';
import { ModelPool } from './pools.js';

export interface AdapterSpec {
  name: string;
  /** The path the engine loads it from. */
  source: string;
}

/** What may be served: base (catalog model name or served name) → its adapters. Called often; return the same object while unchanged. */
export type AdapterCatalog = () => ReadonlyMap<string, readonly AdapterSpec[]>;

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

/** How long a load waits for an adapter in use to go idle before it unloads it anyway. */
const BUSY_WAIT_MS = 30_000;

export const DEFAULT_ADAPTER_ROUTING: AdapterRouterOptions = { pollMs: 250, demandHalfLifeMs: 5000, spreadFactor: 1 };

interface Demand {
  score: number;
  at: number;
}

export interface AdapterTarget {
  spec: AdapterSpec;
  base: ModelPool;
}

export class AdapterRouter {
  private readonly views = new Map<string, EngineAdapters>();
  private readonly demand = new Map<string, Demand>();
  private readonly tables = new Map<string, AffinityTable<Endpoint>>();
  private readonly pools = new Map<string, { key: string; pool: ModelPool }>();
  private index = new Map<string, { spec: AdapterSpec; base: string }>();
  private byBase = new Map<string, AdapterSpec[]>();
  private indexedFrom: ReadonlyMap<string, readonly AdapterSpec[]> | undefined;
  private readonly timer: NodeJS.Timeout;
  private readonly loads: Counter;
  private readonly unloads: Counter;
  private readonly loadSeconds: Histogram;
  private readonly held: Counter;
  private readonly holding: Gauge;

  constructor(
    private readonly catalog: AdapterCatalog,
    /** Base pools by served name, and each base's catalog model names (from the deployments). */
    private readonly bases: () => Iterable<{ pool: ModelPool; models: readonly string[] }>,
    private readonly metricsFor: (name: string) => ModelMetrics,
    registry: Registry,
    private readonly options: AdapterRouterOptions = DEFAULT_ADAPTER_ROUTING,
    private readonly log: (line: string) => void = () => undefined,
  ) {
    const registers = [registry];
    this.loads = new Counter({
      name: 'llmgw_router_adapter_loads_total',
      help: 'Adapter loads this router asked engines for, by result.',
      labelNames: ['result'],
      registers,
    });
    this.unloads = new Counter({
      name: 'llmgw_router_adapter_unloads_total',
      help: 'Adapter unloads this router asked engines for, by reason.',
      labelNames: ['reason'],
      registers,
    });
    this.loadSeconds = new Histogram({
      name: 'llmgw_router_adapter_load_seconds',
      help: 'Time an engine took to load an adapter.',
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
      registers,
    });
    this.held = new Counter({
      name: 'llmgw_router_adapter_held_requests_total',
      help: 'Requests held while their adapter was loaded.',
      registers,
    });
    this.holding = new Gauge({ name: 'llmgw_router_adapter_requests_held', help: 'Requests held now for an adapter load.', registers });
    const views = this.views;
    new Gauge({
      name: 'llmgw_router_adapters_loaded',
      help: 'Adapters each engine holds, as the router last saw it.',
      labelNames: ['endpoint'],
      registers,
      // Read at scrape time, so the page shows the view as it is.
      collect() {
        this.reset();
        for (const [url, view] of views) this.set({ endpoint: url }, view.loaded.size);
      },
    });
    this.timer = setInterval(() => void this.poll(), options.pollMs);
    this.timer.unref();
  }

  /** The adapter a request names, with its base's pool; undefined when `model` is no adapter the catalog lists. */
  resolve(model: string): AdapterTarget | undefined {
    this.reindex();
    const found = this.index.get(model);
    if (found === undefined) return undefined;
    for (const { pool } of this.bases()) if (pool.servedName === found.base) return { spec: found.spec, base: pool };
    return undefined;
  }

  /** For a 404: every adapter the catalog lists, by base. */
  knownAdapters(): string {
    this.reindex();
    const parts = [...this.byBase].map(([base, list]) => `${base}: ${list.map((a) => a.name).join(', ')}`);
    return parts.length === 0 ? '' : ` Known adapters by base model: ${parts.join('; ')}.`;
  }

  /** /v1/models entries of every adapter whose base has a replica, with `parent` as vLLM writes it. */
  modelCards(created: number): object[] {
    this.reindex();
    const cards: object[] = [];
    for (const { pool } of this.bases()) {
      if (pool.endpoints.length === 0) continue;
      for (const a of this.byBase.get(pool.servedName) ?? [])
        cards.push({ id: a.name, object: 'model', created, owned_by: 'llmgw', root: a.source, parent: pool.servedName });
    }
    return cards;
  }

  /** Which adapters each engine holds, as this router sees it (for status). */
  loadedByEndpoint(): Record<string, string[]> {
    return Object.fromEntries([...this.views].map(([url, v]) => [url, [...v.loaded].sort()]));
  }

  /**
   * The pool to send a request for `target` to: the replicas that hold it, after a load on the
   * chosen one when none does. Rejects with AdapterLoadError when the load fails.
   */
  async poolFor(target: AdapterTarget, now: number): Promise<{ pool: ModelPool; release: () => void }> {
    const releases: Array<() => void> = [];
    const pool = await this.holdersPool(target, now, releases);
    return { pool, release: () => releases.forEach((r) => r()) };
  }

  private async holdersPool(target: AdapterTarget, now: number, releases: Array<() => void>): Promise<ModelPool> {
    const { spec, base } = target;
    const share = this.recordDemand(spec.name, base.servedName, now);
    if (this.options.ignoreLoaded === true) {
      const landed = pickLeastLoaded(base.endpoints, undefined, now);
      if (landed === undefined) throw new AdapterLoadError(`no replica of ${base.servedName} is ready`, 0);
      const view = this.view(landed);
      if (!view.loaded.has(spec.name) || view.pending.has(spec.name)) {
        this.held.inc();
        releases.push(this.using(landed, spec.name, now));
        await this.ensureLoaded(view, spec);
      }
      return this.pool(spec.name, base, [landed]);
    }
    let holders = this.holders(spec.name, base);
    // A load may be undone by another's LRU unload before this request is sent: try again, a few times.
    for (let attempt = 0; holders.length === 0 && attempt < 3; attempt++) {
      // A load already under way for it is joined, not doubled elsewhere.
      const chosen = [...this.viewsOf(base)].find((v) => v.pending.has(spec.name)) ?? this.chooseForLoad(spec.name, base.endpoints);
      if (chosen === undefined) throw new AdapterLoadError(`no replica of ${base.servedName} is ready to load adapter ${spec.name}`, 0);
      this.held.inc();
      this.holding.inc();
      // Counted in use there from now, so that no other load unloads it before this request is sent.
      releases.push(this.using(chosen.endpoint, spec.name, now));
      try {
        await this.ensureLoaded(chosen, spec);
      } finally {
        this.holding.dec();
      }
      holders = this.holders(spec.name, base);
    }
    if (holders.length > 0) {
      // A hot adapter spreads: loaded on more replicas while requests keep going where it is.
      const wanted = Math.min(base.endpoints.length, 1 + Math.floor(share * base.endpoints.length * this.options.spreadFactor));
      if (holders.length < wanted && ![...this.viewsOf(base)].some((v) => v.pending.has(spec.name))) {
        const others = base.endpoints.filter((e) => !holders.includes(e));
        const chosen = this.chooseForLoad(spec.name, others);
        if (chosen !== undefined)
          void this.ensureLoaded(chosen, spec).catch((err: Error) =>
            this.log(`router: spreading adapter ${spec.name} to ${chosen.endpoint.url} failed: ${err.message}`),
          );
      }
    }
    return this.pool(spec.name, base, holders);
  }

  /** The pool as it is now, for a retry (which cannot wait for a load). */
  currentPool(model: string): ModelPool | undefined {
    const target = this.resolve(model);
    return target === undefined ? undefined : this.pool(model, target.base, this.holders(model, target.base));
  }

  /** A request for `name` is sent to `e`: LRU order and in-flight count; returns the call that ends it. */
  using(e: Endpoint, name: string, now: number): () => void {
    const view = this.view(e);
    view.lastUsed.set(name, now);
    view.inflight.set(name, (view.inflight.get(name) ?? 0) + 1);
    return () => view.inflight.set(name, (view.inflight.get(name) ?? 1) - 1);
  }

  private holders(name: string, base: ModelPool): Endpoint[] {
    return base.endpoints.filter((e) => this.views.get(e.url)?.loaded.has(name) === true && !this.views.get(e.url)?.pending.has(name));
  }

  private *viewsOf(base: ModelPool): Iterable<EngineAdapters> {
    for (const e of base.endpoints) yield this.view(e);
  }

  /**
   * Where to load: the least-loaded replica with a free slot; when every one is full, the one
   * whose least recently used adapter is the oldest (a global LRU over all the base's slots,
   * which keeps warm adapters loaded far better than evicting wherever load is lowest), with
   * load as the tie-break. Overloaded replicas (over twice the mean) are passed over while
   * another can take it.
   */
  private chooseForLoad(name: string, endpoints: readonly Endpoint[]): EngineAdapters | undefined {
    const now = performance.now();
    let best: EngineAdapters | undefined;
    let bestKey = Infinity;
    let mean = 0;
    for (const e of endpoints) mean += e.score() / endpoints.length;
    for (const e of endpoints) {
      const view = this.view(e);
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

  /** Loads `spec` on the engine (once, however many requests ask), making room first when its slots are full. */
  private ensureLoaded(view: EngineAdapters, spec: AdapterSpec): Promise<void> {
    const under = view.pending.get(spec.name);
    if (under !== undefined) return under;
    const job = view
      .serially(async () => {
        if (view.slots === 0) await readEngineAdapters(view).catch(() => undefined);
        if (view.loaded.has(spec.name)) return;
        while (view.slots > 0 && view.loaded.size + 1 > view.slots) {
          // Every adapter there in use: requests on their way would meet a 404, so wait (a while) for one to go idle.
          let victim = view.victim();
          const deadline = performance.now() + BUSY_WAIT_MS;
          while (victim !== undefined && view.busy(victim) && performance.now() < deadline) {
            await new Promise((resolve) => setTimeout(resolve, 10));
            victim = view.victim();
          }
          if (victim === undefined) break;
          view.loaded.delete(victim);
          await unloadAdapter(view.endpoint, victim);
          this.unloads.inc({ reason: 'lru' });
        }
        const started = performance.now();
        try {
          await loadAdapter(view.endpoint, spec.name, spec.source);
        } catch (err) {
          this.loads.inc({ result: 'failed' });
          this.log(`router: loading adapter ${spec.name} on ${view.endpoint.url} failed: ${(err as Error).message}`);
          throw err;
        }
        this.loadSeconds.observe((performance.now() - started) / 1000);
        this.loads.inc({ result: 'ok' });
        view.loaded.add(spec.name);
        // Just loaded for requests about to be sent: the most recently used, not the next victim.
        view.lastUsed.set(spec.name, performance.now());
      })
      .finally(() => view.pending.delete(spec.name));
    view.pending.set(spec.name, job);
    return job;
  }

  /** Decayed request counts: the adapter's share of its base's recent traffic. */
  private recordDemand(name: string, base: string, now: number): number {
    const bump = (key: string) => {
      const d = this.demand.get(key) ?? { score: 0, at: now };
      d.score = d.score * Math.pow(2, -(now - d.at) / this.options.demandHalfLifeMs) + 1;
      d.at = now;
      this.demand.set(key, d);
      return d.score;
    };
    const mine = bump(`a\0${name}`);
    const all = bump(`b\0${base}`);
    // A handful of requests is no evidence of heat.
    return all < 8 ? 0 : mine / all;
  }

  private pool(name: string, base: ModelPool, holders: Endpoint[]): ModelPool {
    const key = `${base.policy}\0${holders.map((e) => e.url).join('\0')}`;
    const cached = this.pools.get(name);
    if (cached !== undefined && cached.key === key) return cached.pool;
    let table = this.tables.get(name);
    if (base.policy === 'cache-aware' && table === undefined) {
      table = new AffinityTable<Endpoint>(DEFAULT_GUARD);
      this.tables.set(name, table);
    }
    const pool = new ModelPool(name, holders, base.policy, this.metricsFor(name), table);
    pool.adapterLost = (e) => this.view(e).loaded.delete(name);
    this.pools.set(name, { key, pool });
    return pool;
  }

  private view(e: Endpoint): EngineAdapters {
    let view = this.views.get(e.url);
    if (view === undefined || view.endpoint !== e) {
      view = new EngineAdapters(e);
      this.views.set(e.url, view);
    }
    return view;
  }

  private reindex(): void {
    const catalog = this.catalog();
    if (catalog === this.indexedFrom) return;
    this.indexedFrom = catalog;
    this.rebuildIndex();
  }

  private rebuildIndex(): void {
    const catalog = this.indexedFrom ?? new Map<string, readonly AdapterSpec[]>();
    const index = new Map<string, { spec: AdapterSpec; base: string }>();
    const byBase = new Map<string, AdapterSpec[]>();
    for (const { pool, models } of this.bases()) {
      const specs = [pool.servedName, ...models].map((m) => catalog.get(m)).find((s) => s !== undefined) ?? [];
      if (specs.length === 0) continue;
      byBase.set(pool.servedName, [...specs]);
      for (const spec of specs) index.set(spec.name, { spec, base: pool.servedName });
    }
    this.index = index;
    this.byBase = byBase;
  }

  /**
   * Level-triggered: read every engine of a base with adapters; forget engines that left; unload
   * what the catalog no longer lists. An engine that cannot be read holds nothing (it restarted
   * or is gone), so a request for an adapter there is not sent to it blind.
   */
  private polling = false;
  private async poll(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      this.reindex();
      this.rebuildIndex();
      const live = new Set<string>();
      const reads: Promise<void>[] = [];
      for (const { pool } of this.bases()) {
        const allowed = this.byBase.get(pool.servedName);
        if (allowed === undefined) continue;
        const names = new Set(allowed.map((a) => a.name));
        for (const e of pool.endpoints) {
          live.add(e.url);
          const view = this.view(e);
          reads.push(
            readEngineAdapters(view).then(
              () => this.unloadUnlisted(view, names),
              () => {
                view.reachable = false;
                view.slots = 0;
                for (const name of view.loaded) if (!view.pending.has(name)) view.loaded.delete(name);
              },
            ),
          );
        }
      }
      await Promise.all(reads);
      for (const url of this.views.keys()) if (!live.has(url)) this.views.delete(url);
    } finally {
      this.polling = false;
    }
  }

  private async unloadUnlisted(view: EngineAdapters, allowed: ReadonlySet<string>): Promise<void> {
    for (const name of [...view.loaded]) {
      if (allowed.has(name) || view.pending.has(name)) continue;
      view.loaded.delete(name);
      await unloadAdapter(view.endpoint, name).catch(() => undefined);
      this.unloads.inc({ reason: 'removed' });
      this.log(`router: unloaded adapter ${name} from ${view.endpoint.url}: the catalog no longer lists it`);
    }
  }

  close(): void {
    clearInterval(this.timer);
  }
}
