// `llmgw router …`: the router as a process. Checks the flags (flags.ts), learns routes from
// Temporal or a static list (routes/source.ts), scales deployments (autoscale/), starts one
// router or a --workers cluster of them (cluster.ts), and shuts down cleanly on SIGTERM/SIGINT,
// letting streams in flight finish for a while. Router side; what a request meets starts at
// http/server.ts.
import { hostname } from 'node:os';
import { Registry } from 'prom-client';
import { adapterCatalog } from '../catalog/adapters.js';
import { createCatalogSource } from '../catalog/watch.js';
import { Autoscaler } from './autoscale/autoscaler.js';
import { holdToPrimary, reportToPrimary, type LoadReport } from './autoscale/load-report.js';
import { TemporalDeploymentControl, temporalReplicaSleeper } from './autoscale/temporal.js';
import { oneWakePerReplica, temporalWakeCaller, wakeThroughPrimary } from './autoscale/wakes.js';
import type { WakeCaller } from './engines/wake.js';
import { announceListening, clusterMetricsSource, isRouterWorker, startRouterCluster } from './cluster.js';
import { parseRouterFlags, type RouterFlags, type RouterSettings } from './flags.js';
import { prepareAdminSocket } from './http/admin.js';
import { describeAdmin } from './http/admin-addr.js';
import { watchApiKeys, type KeyReloader } from './http/key-reload.js';
import { startRouter, type Router } from './http/server.js';
import { temporalCallCounter } from './metrics.js';
import type { RouterOptions } from './options.js';
import type { AffinitySettings } from './policies/affinity-settings.js';
import { PrimaryRouteSource } from './routes/cluster.js';
import { chooseRouteSource } from './routes/source.js';
import type { RouteSource } from './routes/table.js';
import { DirectoryFileStore } from '../batches/file-store.js';
import type { FilesSettings } from '../batches/files-api.js';
import { S3FileStore } from '../batches/s3-file-store.js';

// cli (cli/commands/router.ts) names the flags' type from here.
export { isLoopback, RouterFlagsError, type RouterFlags } from './flags.js';

/** What runRouter started: one router, or the primary of several. */
export interface RunningRouter {
  port: number;
  close(): Promise<void>;
}

type Log = (line: string) => void;

/** What the one process per router that talks to Temporal owns: its metrics, routes and autoscaler. */
interface TemporalSide {
  registry: Registry;
  routes: RouteSource;
  autoscaler: Autoscaler | undefined;
  /** Where the autoscaler reads load from: this process's router, or every worker's. */
  reports: () => LoadReport[];
  /** Wakes sleeping replicas, one Update per replica at a time (undefined without Temporal: static routes). */
  wake: WakeCaller | undefined;
  /** Who this router is, in its Updates. */
  routerId: string;
  /** The route source's Temporal client (undefined: static routes), for /v1/batches. */
  client: (() => Promise<import('@temporalio/client').Client>) | undefined;
}

/**
 * Starts the router and keeps it running until SIGTERM or SIGINT. Resolves once it is serving.
 * With --workers N the primary forks N copies of this program, which come back here as workers.
 */
export async function runRouter(flags: RouterFlags, env: NodeJS.ProcessEnv = process.env): Promise<RunningRouter> {
  const settings = parseRouterFlags(flags, env);
  const f = settings.flags;
  const log: Log = (line) => console.log(line);
  if (f.workers > 1 && !isRouterWorker()) {
    const temporal = temporalSide(settings, log);
    prepareAdminSocket(settings.admin);
    const routers = await startRouterCluster(f.workers, log, temporal);
    temporal.reports = () => routers.reports();
    temporal.autoscaler?.start();
    log(`router: ${f.workers} workers listening on http://${f.host}:${routers.port} (pids ${routers.pids().join(', ')})`);
    log(describeAdmin(f.host, routers.adminPort, settings.admin));
    onStopSignal(log, f.shutdownGrace, () => routers.close());
    // Each worker reads the keys file itself; SIGHUP to the primary reaches them all.
    if (settings.reloadApiKeys) process.on('SIGHUP', () => routers.pids().forEach((pid) => process.kill(pid, 'SIGHUP')));
    return routers;
  }
  if (isRouterWorker()) return runWorker(settings, log);
  const temporal = temporalSide(settings, log);
  const autoscaler = temporal.autoscaler;
  const router = await startRouter({
    ...routerOptions(settings, log),
    files: await openFiles(settings, log),
    ...(temporal.client ? { batches: { client: temporal.client } } : {}),
    source: temporal.routes,
    extraMetrics: temporal.registry,
    onHold: (model) => autoscaler?.hold(model),
    ...(temporal.wake !== undefined ? { wakeReplica: temporal.wake } : {}),
    routerId: temporal.routerId,
    onTable: autoscaler ? (snapshot) => autoscaler.setTable(snapshot) : undefined,
  });
  temporal.reports = () => [router.loadReport()];
  autoscaler?.start();
  const keys = reloadKeysOnChange(settings, router, log);
  onStopSignal(log, f.shutdownGrace, () => {
    // Nothing that talks to Temporal may outlive the client the route source is about to close.
    autoscaler?.stop();
    keys?.stop();
    return router.close(f.shutdownGrace * 1000);
  });
  logServing(settings, router, log);
  return router;
}

/** A worker of a cluster: routes come from the primary, holds and loads go to it, /metrics answers for all. */
async function runWorker(settings: RouterSettings, log: Log): Promise<Router> {
  const workerLog: Log = (line) => log(`[worker ${process.pid}] ${line}`);
  // /metrics on any worker answers for all of them, once the router's own registry exists.
  const cluster: { metricsText?: () => Promise<string> } = {};
  const router = await startRouter({
    ...routerOptions(settings, workerLog),
    files: await openFiles(settings, workerLog),
    source: new PrimaryRouteSource(),
    metricsText: () => (cluster.metricsText as () => Promise<string>)(),
    onHold: holdToPrimary,
    // The primary holds the Temporal client, and sends one wake per replica for all workers.
    wakeReplica: wakeThroughPrimary(),
  });
  reportToPrimary(() => router.loadReport());
  announceListening(router.port, router.adminPort);
  const keys = reloadKeysOnChange(settings, router, workerLog);
  onStopSignal(workerLog, settings.flags.shutdownGrace, () => {
    keys?.stop();
    return router.close(settings.flags.shutdownGrace * 1000);
  });
  cluster.metricsText = clusterMetricsSource(router.registry);
  return router;
}

/** Routes, Temporal's call counter and the autoscaler, in the process that talks to Temporal. */
function temporalSide(settings: RouterSettings, log: Log): TemporalSide {
  const f = settings.flags;
  // A router is known to the routes workflow by its address: one restarted in its place takes
  // over its entry, instead of leaving a silent one that every drain would wait for (the routes
  // workflow counts a router live for ten minutes after its last call).
  const routerId = f.routerId ?? (f.port === 0 ? `${hostname()}/${process.pid}` : `${hostname()}:${f.port}`);
  const registry = new Registry();
  const routes = chooseRouteSource(
    {
      staticRoutes: settings.staticRoutes,
      routes: f.routes,
      routerId,
      catalogKey: settings.catalogKey,
      insecureRoutes: settings.insecureRoutes,
      routeHoldS: f.routeHold,
      onCall: temporalCallCounter(registry),
      engineKey: settings.engineKey,
    },
    log,
  );
  // The autoscaler's and the wakes' Updates share the route source's client.
  const client = routes.temporalClient?.bind(routes);
  const wake = client === undefined ? undefined : oneWakePerReplica(temporalWakeCaller(client));
  const side: TemporalSide = {
    registry,
    routes,
    autoscaler: undefined,
    reports: () => [],
    // Whichever process asked, the wake is this router's, in the replica's history.
    wake: wake === undefined ? undefined : (replicaId, request) => wake(replicaId, { ...request, by: `router:${routerId}` }),
    routerId,
    client,
  };
  if (f.autoscale === 'off') return side;
  side.autoscaler = new Autoscaler({
    control: client ? new TemporalDeploymentControl(client) : undefined,
    // The ladder: idle replicas to sleep, and sleepers woken for load through the one wake caller.
    ...(client ? { sleep: temporalReplicaSleeper(client) } : {}),
    ...(wake ? { wake } : {}),
    registry,
    reports: () => side.reports(),
    routerId,
    log,
  });
  return side;
}

/** What every router process is started with, whoever it reports to. */
function routerOptions(settings: RouterSettings, log: Log): Omit<RouterOptions, 'source'> {
  const f = settings.flags;
  // Adapters are read from the catalog here, not carried by the route table: adding or removing
  // one changes no workflow and rolls no replica.
  const { catalogPath } = settings;
  return {
    adapters: catalogPath === undefined ? undefined : adapterCatalog(createCatalogSource(catalogPath, { log })),
    port: f.port,
    host: f.host,
    apiKeys: settings.apiKeys,
    limitShare: 1 / f.workers,
    affinity: settings.affinity,
    guard: { absGap: f.affinityAbsGap, relGap: f.affinityRelGap },
    kvEvents: settings.kvEvents,
    bodyLimitBytes: f.bodyLimit,
    // Each process of a cluster holds its share, as of the waiting lines.
    heldBytes: Math.ceil(f.heldBytes / f.workers),
    debugHeaders: f.debugHeaders,
    ...(settings.engineKey !== undefined ? { engineKey: settings.engineKey } : {}),
    upstreamIdleTimeoutMs: f.upstreamIdleTimeout * 1000,
    insecureRoutes: settings.insecureRoutes,
    // Workers share the admin address as they share the public one (node:cluster).
    admin: settings.admin,
    processMetrics: true,
    log,
    queue: settings.queue,
  };
}

/** The Files API's store (--files-dir or --files-s3), or undefined when neither is set. */
async function openFiles(settings: RouterSettings, log: Log): Promise<FilesSettings | undefined> {
  const f = settings.flags;
  let store: DirectoryFileStore | S3FileStore;
  if (f.filesDir !== undefined) store = await DirectoryFileStore.open(f.filesDir);
  else if (f.filesS3 !== undefined) {
    store = new S3FileStore(f.filesS3);
    await store.check();
  } else return undefined;
  log(`router: /v1/files keeps files in ${store.location} (at most ${f.filesMaxBytes} bytes each)`);
  return { store, maxBytes: f.filesMaxBytes };
}

function logServing(settings: RouterSettings, router: Router, log: Log): void {
  const f = settings.flags;
  const health = router.health();
  const keys = settings.apiKeys ? `${settings.apiKeys.size} API key(s)` : 'no API keys: open to anyone who can reach it';
  log(
    `router: listening on http://${f.host}:${router.port} (routes from ${health.routes.source}, ${health.models} model(s) routable; ` +
      `${keys}; cache-aware routing ${describeAffinity(settings.affinity)})`,
  );
  log(describeAdmin(f.host, router.adminPort, settings.admin));
}

/** With --api-keys-file: the keys read again when the file changes or on SIGHUP (http/key-reload.ts). */
function reloadKeysOnChange(settings: RouterSettings, router: Router, log: Log): KeyReloader | undefined {
  const { reloadApiKeys: read } = settings;
  const file = settings.flags.apiKeysFile;
  if (read === undefined || file === undefined) return undefined;
  const reloader = watchApiKeys({ file, read, apply: (keys) => router.replaceApiKeys(keys), log });
  process.on('SIGHUP', () => reloader.reload('SIGHUP'));
  return reloader;
}

function onStopSignal(log: Log, graceS: number, close: () => Promise<void>): void {
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
