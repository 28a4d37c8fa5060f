// The router's live routing state: for each model name the endpoints that may take its
// requests, each endpoint one shared object (pool, load, health) however many models or table
// refreshes refer to it. Rebuilt from the route table only when it changes. Router side.
import { HashRing, pickLeastLoaded, type AffinityMode } from './balancer.js';
import { Endpoint } from './endpoint.js';
import type { ModelMetrics, RouterMetrics } from './metrics.js';
import { buildModelRoutes, type RouteEntry } from './routes.js';
import { createUpstreamPool, type UpstreamOptions } from './upstream.js';

export class ModelPool {
  readonly ring: HashRing<Endpoint> | undefined;
  /** The served name as the JSON string a body carries, to put in place of a deployment alias. */
  readonly servedNameJson: Buffer;

  constructor(
    readonly servedName: string,
    readonly endpoints: Endpoint[],
    readonly affinity: AffinityMode | undefined,
    readonly metrics: ModelMetrics,
  ) {
    this.servedNameJson = Buffer.from(JSON.stringify(servedName));
    this.ring = affinity !== undefined && endpoints.length > 1 ? new HashRing(endpoints) : undefined;
  }

  /** The endpoint for the next attempt; `key` is the affinity hash, -1 for none. */
  pick(key: number, tried: Endpoint[] | undefined, now: number): Endpoint | undefined {
    if (this.ring !== undefined && key >= 0) return this.ring.pick(key, tried, now);
    return pickLeastLoaded(this.endpoints, tried, now);
  }
}

export class RoutingState {
  /** By served name and deployment alias; the same ModelPool may appear under both. */
  private models = new Map<string, ModelPool>();
  private readonly endpoints = new Map<string, Endpoint>();
  private readonly metricsByModel = new Map<string, ModelMetrics>();
  private modelsJson = '{"object":"list","data":[]}';

  constructor(
    private readonly metrics: RouterMetrics,
    private readonly upstream: UpstreamOptions,
    private readonly affinity: ReadonlyMap<string, AffinityMode>,
  ) {}

  lookup(model: string): ModelPool | undefined {
    return this.models.get(model);
  }

  liveEndpoints(): IterableIterator<Endpoint> {
    return this.endpoints.values();
  }

  /** The /v1/models body: served names with at least one routable replica. */
  modelsBody(): string {
    return this.modelsJson;
  }

  routableModelCount(): number {
    let n = 0;
    for (const [name, pool] of this.models) if (name === pool.servedName && pool.endpoints.length > 0) n++;
    return n;
  }

  apply(entries: readonly RouteEntry[]): void {
    const routes = buildModelRoutes(entries);
    const wanted = new Set<string>();
    for (const route of routes.values()) for (const url of route.endpoints) wanted.add(url);

    // Endpoints that left the table (drained, stopped) take no new request; their pools close
    // once the requests already there have finished.
    for (const [url, endpoint] of this.endpoints) {
      if (wanted.has(url)) continue;
      this.endpoints.delete(url);
      void endpoint.pool.close().catch(() => undefined);
    }
    for (const url of wanted) {
      if (!this.endpoints.has(url)) this.endpoints.set(url, new Endpoint(url, createUpstreamPool(url, this.upstream)));
    }

    const models = new Map<string, ModelPool>();
    const built = new Map<string, ModelPool>();
    for (const [name, route] of routes) {
      let pool = built.get(route.servedName);
      if (!pool) {
        const endpoints = route.endpoints.map((url) => this.endpoints.get(url) as Endpoint);
        const mode = this.affinity.get(route.servedName) ?? route.deployments.map((d) => this.affinity.get(d)).find((m) => m !== undefined);
        pool = new ModelPool(route.servedName, endpoints, mode, this.modelMetrics(route.servedName));
        built.set(route.servedName, pool);
      }
      models.set(name, pool);
    }
    this.models = models;

    const created = Math.floor(Date.now() / 1000);
    const data = [...built.values()]
      .filter((pool) => pool.endpoints.length > 0)
      .map((pool) => ({ id: pool.servedName, object: 'model', created, owned_by: 'llmgw' }));
    this.modelsJson = JSON.stringify({ object: 'list', data });
  }

  private modelMetrics(name: string): ModelMetrics {
    let m = this.metricsByModel.get(name);
    if (!m) {
      m = this.metrics.forModel(name);
      this.metricsByModel.set(name, m);
    }
    return m;
  }

  async close(): Promise<void> {
    const pools = [...this.endpoints.values()].map((e) => e.pool);
    this.endpoints.clear();
    this.models = new Map();
    await Promise.all(pools.map((p) => p.destroy().catch(() => undefined)));
  }
}
