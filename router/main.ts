// `llmgw router …`: the router as a process. Turns the command's flags and environment into
// RouterOptions, learns routes from Temporal (or a static list), and shuts down cleanly on
// SIGTERM/SIGINT, letting streams in flight finish for a while. Router side.
import { VerifiedRouteSource } from './routes-verify.js';
import { readEngineKey } from '../agent/engine-identity.js';
import { z } from 'zod';
import { DEFAULT_PORTS } from '../common/names.js';
import { loadApiKeys, type ApiKeys } from './auth.js';
import { Registry } from 'prom-client';
import { announceListening, clusterMetricsSource, isRouterWorker, startRouterCluster } from './cluster.js';
import { PrimaryRouteSource } from './cluster-routes.js';
import { temporalCallCounter } from './metrics.js';
import { WatchRouteSource } from './routes-watch.js';
import { DEFAULT_GUARD } from './policies/affinity-table.js';
import { parseAffinity, type AffinitySettings } from './affinity-settings.js';
import { TemporalRouteSource } from './routes-temporal.js';
import { DEFAULT_HOLD, HoldingRouteSource } from './held-routes.js';
import { StaticRouteSource, parseStaticRoutes, type RouteSource, type StaticRoute } from './routes.js';
import { DEFAULT_BODY_LIMIT, startRouter, type Router } from './server.js';
import { hostname } from 'node:os';
import { Autoscaler } from './autoscaler.js';
import { TemporalDeploymentControl } from './autoscale-temporal.js';
import { holdToPrimary, reportToPrimary, type LoadReport } from './load-report.js';
import { DEFAULT_QUEUE, type QueueSettings } from './waiting-room.js';
import { AdminAddr, adminListener, describeAdmin } from './admin-addr.js';
import { DEFAULT_HELD_BYTES } from './byte-budget.js';
import { DEFAULT_KEY_CONCURRENCY } from './limits.js';
import { DEFAULT_UPSTREAM } from './upstream.js';
import { createCatalogSource } from '../catalog/watch.js';
import { adapterCatalog } from '../catalog/adapters.js';

/** The flags of `llmgw router` as commander hands them over (strings, as typed). */
export interface RouterFlags {
  /** --port, default 8080. */
  port?: string | number;
  /** --host, default 0.0.0.0: clients reach the router from elsewhere. */
  host?: string;
  /** --api-keys-file: one key per line; LLMGW_API_KEYS adds more. */
  apiKeysFile?: string;
  /** --affinity `on|off|NAME:on|NAME:off,...` (cache-aware routing, on by default); defaults to LLMGW_ROUTER_AFFINITY. */
  affinity?: string;
  /** --kv-events `off|PORT|+OFFSET`: follow engines' KV-cache events; defaults to LLMGW_ROUTER_KV_EVENTS. */
  kvEvents?: string;
  /** --catalog FILE: the LoRA adapters each base may load (re-read on change); defaults to LLMGW_CATALOG. */
  catalog?: string;
  /** --affinity-abs-gap: in-flight requests a home may hold beyond the least-loaded replica. */
  affinityAbsGap?: string | number;
  /** --affinity-rel-gap: how many times the least-loaded replica's load a home may hold. */
  affinityRelGap?: string | number;
  /** --static-routes `name=http://host:port,...`: serve these instead of asking Temporal. */
  staticRoutes?: string;
  /** --body-limit bytes, default 8 MiB. */
  bodyLimit?: string | number;
  /** --shutdown-grace seconds for in-flight requests on SIGTERM, default 30. */
  shutdownGrace?: string | number;
  /** --workers N router processes on the one port (node:cluster), default 1. */
  workers?: string | number;
  /** --routes watch (the routes workflow, default) or visibility (list replicas every half second, as before). */
  routes?: string;
  /** --allow-unauthenticated: serve a non-loopback address with no API key configured. */
  allowUnauthenticated?: boolean;
  /** --key-rps: each key's requests per second unless its line sets one. */
  keyRps?: string | number;
  /** --key-concurrency: each key's requests in flight unless its line sets one. */
  keyConcurrency?: string | number;
  /** --queue-size: requests held per deployment (at zero, starting, or saturated), default 1000. */
  queueSize?: string | number;
  /** --queue-timeout seconds a held request may wait, default 300. */
  queueTimeout?: string | number;
  /** --saturated-waiting N|off: an engine with N requests waiting takes no more from this router, default 8. */
  saturatedWaiting?: string | number;
  /** --autoscale on|off: this router scales deployments and wakes them (on by default). */
  autoscale?: string;
  /** --router-id: how the routes workflow knows this router; default HOST:PORT, so a restart replaces itself. */
  routerId?: string;
  /** --route-hold seconds a route Temporal forgot keeps serving while its engine answers (held-routes.ts); 0: never. */
  routeHold?: string | number;
  /** --admin-addr HOST:PORT|off: /metrics and the detailed /health; default 127.0.0.1 and the port after --port. */
  adminAddr?: string;
  /** --debug-headers: name the engine that answered in x-llmgw-endpoint. */
  debugHeaders?: boolean;
  /** --held-bytes: request bodies held in memory at once, default 256 MiB. */
  heldBytes?: string | number;
  /** --upstream-idle-timeout seconds an engine may send nothing, default 600; 0: no limit. */
  upstreamIdleTimeout?: string | number;
  /** --catalog-key: the control worker's public keys; only routes it signed are installed. */
  catalogKey?: string;
  /** --engine-key-file: the API key engines require (the agents' --engine-key-file). */
  engineKeyFile?: string;
}

const Flags = z.object({
  port: z.coerce.number().int().min(0).max(65535).default(DEFAULT_PORTS.router),
  host: z.string().min(1).default('0.0.0.0'),
  apiKeysFile: z.string().min(1).optional(),
  affinity: z.string().optional(),
  kvEvents: z.string().optional(),
  catalog: z.string().min(1).optional(),
  staticRoutes: z.string().optional(),
  bodyLimit: z.coerce.number().int().min(1024).default(DEFAULT_BODY_LIMIT),
  shutdownGrace: z.coerce.number().min(0).default(30),
  workers: z.coerce.number().int().min(1).max(64).default(1),
  allowUnauthenticated: z.boolean().default(false),
  routes: z.enum(['watch', 'visibility']).default('watch'),
  keyRps: z.coerce.number().positive().optional(),
  keyConcurrency: z
    .union([z.literal('off'), z.coerce.number().int().positive()], { error: 'must be a whole number > 0 or off' })
    .default(DEFAULT_KEY_CONCURRENCY),
  affinityAbsGap: z.coerce.number().min(0).default(DEFAULT_GUARD.absGap),
  affinityRelGap: z.coerce.number().min(1).default(DEFAULT_GUARD.relGap),
  queueSize: z.coerce.number().int().min(0).default(DEFAULT_QUEUE.maxPerModel),
  queueTimeout: z.coerce
    .number()
    .positive()
    .default(DEFAULT_QUEUE.maxWaitMs / 1000),
  saturatedWaiting: z
    .union([z.literal('off'), z.coerce.number().int().min(0)], { error: 'must be a whole number ≥ 0 or off' })
    .default(DEFAULT_QUEUE.saturatedWaiting ?? 'off'),
  autoscale: z.enum(['on', 'off']).default('on'),
  routerId: z.string().min(1).optional(),
  routeHold: z.coerce
    .number()
    .min(0)
    .default(DEFAULT_HOLD.maxHoldMs / 1000),
  adminAddr: AdminAddr.optional(),
  debugHeaders: z.boolean().default(false),
  heldBytes: z.coerce.number().int().min(1024).default(DEFAULT_HELD_BYTES),
  upstreamIdleTimeout: z.coerce
    .number()
    .min(0)
    .default(DEFAULT_UPSTREAM.idleTimeoutMs / 1000),
  catalogKey: z.string().min(1).optional(),
  engineKeyFile: z.string().min(1).optional(),
});

/** True for an address only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

export class RouterFlagsError extends Error {
  override name = 'RouterFlagsError';
}

/** What runRouter started: one router, or the primary of several. */
export interface RunningRouter {
  port: number;
  close(): Promise<void>;
}

/**
 * Starts the router and keeps it running until SIGTERM or SIGINT. Resolves once it is serving.
 * With --workers N the primary forks N copies of this program, which come back here as workers.
 */
export async function runRouter(flags: RouterFlags, env: NodeJS.ProcessEnv = process.env): Promise<RunningRouter> {
  const parsed = Flags.safeParse(flags);
  if (!parsed.success) {
    throw new RouterFlagsError(
      parsed.error.issues.map((i) => `--${i.path.join('.').replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}: ${i.message}`).join('; '),
    );
  }
  const f = parsed.data;
  const log = (line: string) => console.log(line);
  let affinity: AffinitySettings;
  let staticRoutes: StaticRoute[] | undefined;
  let admin: { host: string; port: number } | undefined;
  try {
    admin = adminListener(f.adminAddr, f.port);
    affinity = parseAffinity(f.affinity ?? env.LLMGW_ROUTER_AFFINITY);
    staticRoutes = f.staticRoutes ? parseStaticRoutes(f.staticRoutes) : undefined;
  } catch (err) {
    throw new RouterFlagsError((err as Error).message);
  }
  let apiKeys: ApiKeys | undefined;
  try {
    const concurrent = f.keyConcurrency === 'off' ? undefined : f.keyConcurrency;
    apiKeys = loadApiKeys({ file: f.apiKeysFile, env, defaults: { rps: f.keyRps, concurrent } });
  } catch (err) {
    throw new RouterFlagsError((err as Error).message);
  }
  // An open router on a reachable address is somebody's free GPU cluster: refuse unless asked.
  if (apiKeys === undefined && !isLoopback(f.host) && !f.allowUnauthenticated) {
    throw new RouterFlagsError(
      `refusing to serve ${f.host} without API keys: configure keys (--api-keys-file or LLMGW_API_KEYS), ` +
        'bind a loopback address (--host 127.0.0.1), or pass --allow-unauthenticated to serve it open',
    );
  }

  // A router is known to the routes workflow by its address: one restarted in its place takes
  // over its entry, instead of leaving a silent one that every drain would wait for (the routes
  // workflow counts a router live for ten minutes after its last call).
  const routerId = f.routerId ?? (f.port === 0 ? `${hostname()}/${process.pid}` : `${hostname()}:${f.port}`);
  // Only one process per router talks to Temporal: the primary of a cluster, or the router itself.
  const temporalMetrics = new Registry();
  const countCall = temporalCallCounter(temporalMetrics);
  const routeSource = (sourceLog: (line: string) => void): RouteSource => {
    if (staticRoutes) return new StaticRouteSource(staticRoutes);
    const unverified =
      f.routes === 'visibility'
        ? new TemporalRouteSource({ log: sourceLog, onCall: countCall })
        : new WatchRouteSource({ log: sourceLog, onCall: countCall, routerId });
    const keyFile = f.catalogKey ?? (process.env.LLMGW_CATALOG_PUBLIC_KEY_FILE || process.env.LLMGW_CATALOG_KEY_FILE || undefined);
    if (keyFile === undefined)
      sourceLog('router: no --catalog-key: routes are installed unsigned, as anyone in the namespace may write them');
    const temporal = keyFile === undefined ? unverified : new VerifiedRouteSource(unverified, keyFile, sourceLog);
    // Serving never stops because Temporal forgot a replica whose engine still answers.
    return f.routeHold > 0 ? new HoldingRouteSource(temporal, { log: sourceLog, maxHoldMs: f.routeHold * 1000 }) : temporal;
  };

  // Each process of a cluster holds its share of every deployment's line, as of every key limit.
  const queue: QueueSettings = {
    maxPerModel: Math.ceil(f.queueSize / f.workers),
    maxWaitMs: f.queueTimeout * 1000,
    saturatedWaiting: f.saturatedWaiting === 'off' ? undefined : f.saturatedWaiting,
  };
  // The autoscaler lives where Temporal is talked to; its Updates share the route source's client.
  let reports: () => LoadReport[] = () => [];
  const autoscalerFor = (source: RouteSource): Autoscaler | undefined => {
    if (f.autoscale === 'off') return undefined;
    const client = source.temporalClient?.bind(source);
    return new Autoscaler({
      control: client ? new TemporalDeploymentControl(client) : undefined,
      registry: temporalMetrics,
      reports: () => reports(),
      routerId,
      log,
    });
  };

  if (f.workers > 1 && !isRouterWorker()) {
    const routes = routeSource(log);
    const autoscaler = autoscalerFor(routes);
    const routers = await startRouterCluster(f.workers, log, { routes, registry: temporalMetrics, autoscaler });
    reports = () => routers.reports();
    autoscaler?.start();
    log(`router: ${f.workers} workers listening on http://${f.host}:${routers.port} (pids ${routers.pids().join(', ')})`);
    log(describeAdmin(f.host, routers.adminPort, admin));
    onStopSignal(log, f.shutdownGrace, () => routers.close());
    return routers;
  }
  const worker = isRouterWorker();
  const routerLog = worker ? (line: string) => log(`[worker ${process.pid}] ${line}`) : log;
  let clusterMetrics: (() => Promise<string>) | undefined;
  const source: RouteSource = worker ? new PrimaryRouteSource() : routeSource(routerLog);
  const autoscaler = worker ? undefined : autoscalerFor(source);
  // Adapters are read from the catalog here, not carried by the route table: adding or removing
  // one changes no workflow and rolls no replica.
  const catalogPath = f.catalog ?? env.LLMGW_CATALOG;
  const adapters = catalogPath === undefined ? undefined : adapterCatalog(createCatalogSource(catalogPath, { log: routerLog }));
  const router: Router = await startRouter({
    source,
    adapters,
    port: f.port,
    host: f.host,
    apiKeys,
    limitShare: 1 / f.workers,
    affinity,
    guard: { absGap: f.affinityAbsGap, relGap: f.affinityRelGap },
    kvEvents: f.kvEvents ?? env.LLMGW_ROUTER_KV_EVENTS,
    bodyLimitBytes: f.bodyLimit,
    // Each process of a cluster holds its share, as of the waiting lines.
    heldBytes: Math.ceil(f.heldBytes / f.workers),
    debugHeaders: f.debugHeaders,
    ...(f.engineKeyFile !== undefined ? { engineKey: readEngineKey(f.engineKeyFile) } : {}),
    upstreamIdleTimeoutMs: f.upstreamIdleTimeout * 1000,
    // Workers share the admin address as they share the public one (node:cluster).
    admin,
    processMetrics: true,
    log: routerLog,
    metricsText: worker ? () => (clusterMetrics as () => Promise<string>)() : undefined,
    extraMetrics: worker ? undefined : temporalMetrics,
    queue,
    onHold: worker ? holdToPrimary : (model) => autoscaler?.hold(model),
    onTable: autoscaler ? (snapshot) => autoscaler.setTable(snapshot) : undefined,
  });
  if (worker) {
    reportToPrimary(() => router.loadReport());
    announceListening(router.port, router.adminPort);
  }
  reports = () => [router.loadReport()];
  autoscaler?.start();
  onStopSignal(routerLog, f.shutdownGrace, () => {
    // Nothing that talks to Temporal may outlive the client the route source is about to close.
    autoscaler?.stop();
    return router.close(f.shutdownGrace * 1000);
  });
  if (worker) {
    // The primary says where the routers listen; /metrics on any worker answers for all of them.
    clusterMetrics = clusterMetricsSource(router.registry);
    return router;
  }
  const health = router.health();
  log(
    `router: listening on http://${f.host}:${router.port} (routes from ${health.routes.source}, ${health.models} model(s) routable; ` +
      `${apiKeys ? `${apiKeys.size} API key(s)` : 'no API keys: open to anyone who can reach it'}` +
      `; cache-aware routing ${describeAffinity(affinity)})`,
  );
  log(describeAdmin(f.host, router.adminPort, admin));
  return router;
}

function onStopSignal(log: (line: string) => void, graceS: number, close: () => Promise<void>): void {
  let stopping = false;
  const stop = (signal: string) => () => {
    if (stopping) return;
    stopping = true;
    log(`router: ${signal}, finishing in-flight requests (up to ${graceS} s)`);
    void close().then(
      () => {
        log('router: stopped');
        process.exit(0);
      },
      (err: unknown) => {
        console.error(`router: error while stopping: ${(err as Error).message}`);
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', stop('SIGTERM'));
  process.once('SIGINT', stop('SIGINT'));
}

function describeAffinity(a: AffinitySettings): string {
  const named = [...a.byName].map(([name, on]) => `${name}:${on ? 'on' : 'off'}`);
  return [a.enabled ? 'on' : 'off', ...named].join(',');
}
