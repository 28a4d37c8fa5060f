// The router's live routing state: for each model name its ModelPool (model-pool.ts), the
// endpoints that may take its requests, each endpoint one shared object (pool, load, health)
// however many models or table refreshes refer to it, and each model's cache-affinity memory,
// which outlives table changes. Rebuilt from the route table only when it changes. Router side.
import { isTlsPin } from '../../common/engine-tls.js';
import { AFFINITY_ON, type AffinitySettings } from '../policies/affinity-settings.js';
import { Endpoint } from './endpoint.js';
import { KvEventStream } from '../kv/events.js';
import { AffinityTable, DEFAULT_GUARD, type ImbalanceGuard } from '../policies/affinity-table.js';
import { createPolicy, type PolicyName } from '../policies/index.js';
import type { ModelMetrics, RouterMetrics } from '../metrics.js';
import { ModelPool } from './model-pool.js';
import type { ModelQueue } from '../flow/queue.js';
import { buildModelRoutes, isRoutable, type DeploymentEntry, type RouteEntry } from '../routes/table.js';
import { keyChainOf } from '../../common/engine-keys.js';
import { createUpstreamPool, EngineAuths, type EngineAuth, type UpstreamOptions } from './upstream.js';

export interface RoutingOptions {
  affinity: AffinitySettings;
  guard: ImbalanceGuard;
  /** Overrides the policy for every model (bench:affinity compares them). */
  policy: PolicyName | undefined;
  /** Each model's waiting line (the waiting room's); a private one per pool when absent. */
  queueFor?: (servedName: string) => ModelQueue;
  /** Where an engine publishes its KV-cache events (kv/events.ts: parseKvEventsSpec); undefined: nowhere. */
  kvEvents?: ((url: string) => string | undefined) | undefined;
  /** This router can wake a sleeping replica (it has a way to Temporal): a model asleep holds its requests; else they are told at once. */
  wakes?: boolean;
}

export const DEFAULT_ROUTING: RoutingOptions = { affinity: AFFINITY_ON, guard: DEFAULT_GUARD, policy: undefined };

export class RoutingState {
  /** By served name and deployment alias; the same ModelPool may appear under both. */
  private models = new Map<string, ModelPool>();
  private readonly endpoints = new Map<string, Endpoint>();
  private readonly metricsByModel = new Map<string, ModelMetrics>();
  private readonly tables = new Map<string, AffinityTable<Endpoint>>();
  private modelsJson = '{"object":"list","data":[]}';
  /** Served name → the catalog models its deployments run (where adapters are listed). */
  private catalogModels = new Map<string, string[]>();
  /** Each endpoint's key, derived from its route's chain (upstream.ts). */
  private readonly auths: EngineAuths;

  constructor(
    private readonly metrics: RouterMetrics,
    private readonly upstream: UpstreamOptions,
    private readonly routing: RoutingOptions = DEFAULT_ROUTING,
  ) {
    this.auths = new EngineAuths(upstream.engineKey);
  }

  lookup(model: string): ModelPool | undefined {
    return this.models.get(model);
  }

  /** Each model's pool once, with the catalog models behind it: the bases adapters ride on. */
  *bases(): Iterable<{ pool: ModelPool; models: readonly string[] }> {
    for (const [name, pool] of this.models) if (name === pool.servedName) yield { pool, models: this.catalogModels.get(name) ?? [] };
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

  endpointCount(): number {
    return this.endpoints.size;
  }

  apply(entries: readonly RouteEntry[], deployments: readonly DeploymentEntry[] = []): void {
    const routes = buildModelRoutes(entries, deployments);
    this.catalogModels = new Map();
    for (const d of deployments) this.catalogModels.set(d.servedName, [...(this.catalogModels.get(d.servedName) ?? []), d.model]);
    const wanted = new Set<string>();
    for (const route of routes.values()) for (const url of route.endpoints) wanted.add(url);
    const auths = this.endpointAuths(entries, wanted);
    const pins = endpointPins(entries, wanted);

    // Endpoints that left the table (drained, stopped) take no new request; their pools close
    // once the requests already there have finished. So does one whose route now names another
    // key chain (another replica run on the same port): it is opened anew with that run's key;
    // and one whose route names another certificate, anew with that pin.
    for (const [url, endpoint] of this.endpoints) {
      if (wanted.has(url) && endpoint.auth === auths.get(url) && endpoint.tlsPin === pins.get(url)) continue;
      this.endpoints.delete(url);
      endpoint.kv?.close();
      void endpoint.pool.close().catch(() => undefined);
    }
    for (const url of wanted) {
      if (this.endpoints.has(url)) continue;
      const pin = pins.get(url);
      const endpoint = new Endpoint(url, createUpstreamPool(url, this.upstream, pin), auths.get(url), pin);
      const address = this.routing.kvEvents?.(url);
      if (address !== undefined) {
        const kv = new KvEventStream(address);
        kv.start();
        endpoint.kv = kv;
      }
      this.endpoints.set(url, endpoint);
    }

    const models = new Map<string, ModelPool>();
    const built = new Map<string, ModelPool>();
    for (const [name, route] of routes) {
      let pool = built.get(route.servedName);
      if (!pool) {
        const endpoints = route.endpoints.map((url) => this.endpoints.get(url) as Endpoint);
        const metrics = this.modelMetrics(route.servedName);
        const policy = createPolicy(this.policyFor(route.servedName, route.deployments), {
          table: () => this.table(route.servedName),
          counted: (result) => metrics.affinity(result),
        });
        const queue = this.routing.queueFor?.(route.servedName);
        const sleepers = this.routing.wakes === true ? route.sleepers : [];
        const holds = route.autoscaled || sleepers.length > 0;
        pool = new ModelPool(route.servedName, endpoints, policy, metrics, queue, holds, route.deployments, sleepers);
        built.set(route.servedName, pool);
      }
      models.set(name, pool);
    }
    this.models = models;
    for (const name of this.tables.keys()) if (!built.has(name)) this.tables.delete(name);

    const created = Math.floor(Date.now() / 1000);
    // A model asleep is listed too: a request for it is held while it wakes, not refused.
    const listed = new Set([...routes.values()].filter((r) => r.listed || r.sleepers.length > 0).map((r) => r.servedName));
    const data = [...built.values()]
      .filter((pool) => pool.endpoints.length > 0 || listed.has(pool.servedName))
      .map((pool) => ({ id: pool.servedName, object: 'model', created, owned_by: 'llmgw' }));
    this.modelsJson = JSON.stringify({ object: 'list', data });
  }

  /**
   * Each wanted endpoint's headers, from the key chain of the routable entries that name it. Two
   * entries for one endpoint (a stale route beside its successor's) are settled the same way at
   * every router: a chain over none, so the fleet key never goes where a route names a chain; of
   * two chains, the entry sorted first.
   */
  private endpointAuths(entries: readonly RouteEntry[], wanted: ReadonlySet<string>): Map<string, EngineAuth> {
    const named = new Map<string, RouteEntry>();
    for (const entry of [...entries].sort((a, b) => (a.replicaId < b.replicaId ? -1 : a.replicaId > b.replicaId ? 1 : 0))) {
      if (!wanted.has(entry.endpoint) || !isRoutable(entry.phase)) continue;
      const seen = named.get(entry.endpoint);
      if (!seen || (keyChainOf(seen) === undefined && keyChainOf(entry) !== undefined)) named.set(entry.endpoint, entry);
    }
    this.auths.keepOnly(new Set([...named.values()].map((e) => keyChainOf(e)).filter((c) => c !== undefined)));
    return new Map([...named].map(([url, entry]) => [url, this.auths.for(entry)]));
  }

  private policyFor(servedName: string, deployments: readonly string[]): PolicyName {
    if (this.routing.policy !== undefined) return this.routing.policy;
    const { byName, enabled } = this.routing.affinity;
    const named = byName.get(servedName) ?? deployments.map((d) => byName.get(d)).find((on) => on !== undefined);
    return (named ?? enabled) ? 'cache-aware' : 'least-loaded';
  }

  private table(servedName: string): AffinityTable<Endpoint> {
    let table = this.tables.get(servedName);
    if (!table) {
      table = new AffinityTable<Endpoint>(this.routing.guard);
      this.tables.set(servedName, table);
    }
    return table;
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
    for (const e of this.endpoints.values()) e.kv?.close();
    const pools = [...this.endpoints.values()].map((e) => e.pool);
    this.endpoints.clear();
    this.models = new Map();
    await Promise.all(pools.map((p) => p.destroy().catch(() => undefined)));
  }
}

/**
 * Each wanted endpoint's certificate pin, from the routable entries that name it (the first by
 * replica id where two disagree, as for keys: a stale route's pin fails closed, never open).
 * An endpoint whose routes name none is reached over plain HTTP, as before pins.
 */
function endpointPins(entries: readonly RouteEntry[], wanted: ReadonlySet<string>): Map<string, string> {
  const pins = new Map<string, string>();
  for (const entry of [...entries].sort((a, b) => (a.replicaId < b.replicaId ? -1 : a.replicaId > b.replicaId ? 1 : 0))) {
    // Only a well-formed pin makes an endpoint HTTPS: '' (which the route's signature does not
    // cover) or anything else would throw in the connector while the table is applied.
    if (!wanted.has(entry.endpoint) || !isRoutable(entry.phase) || !isTlsPin(entry.tlsPin) || pins.has(entry.endpoint)) continue;
    pins.set(entry.endpoint, entry.tlsPin);
  }
  return pins;
}
