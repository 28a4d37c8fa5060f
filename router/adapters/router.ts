// LoRA adapters at the router: a request whose `model` is an adapter goes to a replica of its
// base that has it loaded (cache-aware among those, as for any model); when none has, the
// least-loaded replica loads it while the request is held, unloading its least recently used
// adapter when its slots are full; a hot adapter is loaded on more replicas in the background.
// The engines are the truth about what is loaded (read every `pollMs`), the catalog about
// what may be (an adapter it no longer lists is unloaded everywhere). Router side.
import type { Registry } from 'prom-client';
import { AdapterIndex, type AdapterCatalog, type AdapterSpec } from './catalog.js';
import { AdapterMetrics } from './metrics.js';
import { chooseForLoad, DemandMeter, replicasWanted, type AdapterRouterOptions } from './placement.js';
import type { AdapterServing, AdapterTarget } from './serve.js';
import { AffinityTable, DEFAULT_GUARD } from '../policies/affinity-table.js';
import { createPolicy } from '../policies/index.js';
import { AdapterLoadError, EngineAdapters, loadAdapter, readEngineAdapters, unloadAdapter } from './engines.js';
import { pickLeastLoaded } from '../policies/least-loaded.js';
import type { Endpoint } from '../engines/endpoint.js';
import type { ModelMetrics } from '../metrics.js';
import { ModelPool } from '../engines/model-pool.js';

/** How long a load waits for an adapter in use to go idle before it unloads it anyway. */
const BUSY_WAIT_MS = 30_000;

export const DEFAULT_ADAPTER_ROUTING: AdapterRouterOptions = { pollMs: 250, demandHalfLifeMs: 5000, spreadFactor: 1 };

export class AdapterRouter implements AdapterServing {
  private readonly views = new Map<string, EngineAdapters>();
  private readonly demand: DemandMeter;
  private readonly tables = new Map<string, AffinityTable<Endpoint>>();
  private readonly pools = new Map<string, { key: string; pool: ModelPool }>();
  private readonly index: AdapterIndex;
  private readonly timer: NodeJS.Timeout;
  private readonly metrics: AdapterMetrics;

  constructor(
    private readonly catalog: AdapterCatalog,
    /** Base pools by served name, and each base's catalog model names (from the deployments). */
    private readonly bases: () => Iterable<{ pool: ModelPool; models: readonly string[] }>,
    private readonly metricsFor: (name: string) => ModelMetrics,
    registry: Registry,
    private readonly options: AdapterRouterOptions = DEFAULT_ADAPTER_ROUTING,
    private readonly log: (line: string) => void = () => undefined,
  ) {
    this.index = new AdapterIndex(catalog, bases);
    this.metrics = new AdapterMetrics(registry, this.views);
    this.demand = new DemandMeter(options.demandHalfLifeMs);
    this.timer = setInterval(() => void this.poll(), options.pollMs);
    this.timer.unref();
  }

  /** The adapter a request names, with its base's pool; undefined when `model` is no adapter the catalog lists. */
  resolve(model: string): AdapterTarget | undefined {
    const found = this.index.lookup(model);
    if (found === undefined) return undefined;
    for (const { pool } of this.bases()) if (pool.servedName === found.base) return { spec: found.spec, base: pool };
    return undefined;
  }

  /** For a 404: every adapter the catalog lists, by base. */
  knownAdapters(): string {
    return this.index.known();
  }

  /** /v1/models entries of every adapter whose base has a replica, with `parent` as vLLM writes it. */
  modelCards(created: number): object[] {
    return this.index.modelCards(created);
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
    const share = this.demand.record(spec.name, base.servedName, now);
    if (this.options.ignoreLoaded === true) {
      const landed = pickLeastLoaded(base.endpoints, undefined, now);
      if (landed === undefined) throw new AdapterLoadError(`no replica of ${base.servedName} is ready`, 0);
      const view = this.view(landed);
      if (!view.loaded.has(spec.name) || view.pending.has(spec.name)) {
        this.metrics.held.inc();
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
      this.metrics.held.inc();
      this.metrics.holding.inc();
      // Counted in use there from now, so that no other load unloads it before this request is sent.
      releases.push(this.using(chosen.endpoint, spec.name, now));
      try {
        await this.ensureLoaded(chosen, spec);
      } finally {
        this.metrics.holding.dec();
      }
      holders = this.holders(spec.name, base);
    }
    if (holders.length > 0) {
      // A hot adapter spreads: loaded on more replicas while requests keep going where it is.
      const wanted = replicasWanted(share, base.endpoints.length, this.options.spreadFactor);
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

  private chooseForLoad(name: string, endpoints: readonly Endpoint[]): EngineAdapters | undefined {
    return chooseForLoad(name, endpoints, (e) => this.view(e), performance.now());
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
          // Before and after: a read that overlaps the unload in any way is stale.
          view.changes++;
          await unloadAdapter(view.endpoint, victim);
          view.changes++;
          this.metrics.unloads.inc({ reason: 'lru' });
        }
        const started = performance.now();
        try {
          await loadAdapter(view.endpoint, spec.name, spec.source);
        } catch (err) {
          this.metrics.loads.inc({ result: 'failed' });
          this.log(`router: loading adapter ${spec.name} on ${view.endpoint.url} failed: ${(err as Error).message}`);
          throw err;
        }
        this.metrics.loadSeconds.observe((performance.now() - started) / 1000);
        this.metrics.loads.inc({ result: 'ok' });
        view.loaded.add(spec.name);
        view.changes++;
        // Just loaded for requests about to be sent: the most recently used, not the next victim.
        view.lastUsed.set(spec.name, performance.now());
      })
      .finally(() => view.pending.delete(spec.name));
    view.pending.set(spec.name, job);
    return job;
  }

  private pool(name: string, base: ModelPool, holders: Endpoint[]): ModelPool {
    const key = `${base.policy.name}\0${holders.map((e) => e.url).join('\0')}`;
    const cached = this.pools.get(name);
    if (cached !== undefined && cached.key === key) return cached.pool;
    const metrics = this.metricsFor(name);
    const policy = createPolicy(base.policy.name, { table: () => this.table(name), counted: (result) => metrics.affinity(result) });
    const pool = new ModelPool(name, holders, policy, metrics);
    pool.adapterLost = (e) => this.view(e).loaded.delete(name);
    this.pools.set(name, { key, pool });
    return pool;
  }

  /** The adapter's own affinity memory, which outlives changes to where it is loaded. */
  private table(name: string): AffinityTable<Endpoint> {
    let table = this.tables.get(name);
    if (table === undefined) {
      table = new AffinityTable<Endpoint>(DEFAULT_GUARD);
      this.tables.set(name, table);
    }
    return table;
  }

  private view(e: Endpoint): EngineAdapters {
    let view = this.views.get(e.url);
    if (view === undefined || view.endpoint !== e) {
      view = new EngineAdapters(e);
      this.views.set(e.url, view);
    }
    return view;
  }

  /** The route table changed: bases may have come or gone. */
  routesChanged(): void {
    this.index.rebuild();
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
      this.index.rebuild();
      const live = new Set<string>();
      const reads: Promise<void>[] = [];
      for (const { pool } of this.bases()) {
        const allowed = this.index.adaptersOf(pool.servedName);
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
      view.changes++;
      await unloadAdapter(view.endpoint, name).catch(() => undefined);
      view.changes++;
      this.metrics.unloads.inc({ reason: 'removed' });
      this.log(`router: unloaded adapter ${name} from ${view.endpoint.url}: the catalog no longer lists it`);
    }
  }

  close(): void {
    clearInterval(this.timer);
  }
}
