// Several router processes behind one port (node:cluster), for throughput past one core: the
// router does about twice an engine's HTTP work per request, so a single event loop saturates
// before a fast engine does. Each worker is a whole router (its own table, balancer counts,
// ejections); the primary forks, restarts, reads the routes for all (routes/cluster.ts) and
// aggregates /metrics. The workers share the admin listener as they share the public one: its
// /metrics, on whichever worker takes the connection, answers for all. Router side.
import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry, type Registry } from 'prom-client';
import type { Autoscaler } from './autoscale/autoscaler.js';
import { broadcastRoutes, type RouteBroadcaster } from './routes/cluster.js';
import { isHoldMessage, isLoadMessage, REPORT_STALE_MS, type LoadReport } from './autoscale/load-report.js';
import type { RouteSource } from './routes/table.js';
import { answerWake, isWakeAsk } from './autoscale/wakes.js';
import type { WakeCaller } from './engines/wake.js';

const METRICS_REQUEST = 'llmgw-router:metrics?';
const METRICS_RESPONSE = 'llmgw-router:metrics';
const METRICS_TIMEOUT_MS = 5000;
/** A worker says it serves, with its ports: 'listening' events cannot tell its two listeners apart. */
const LISTENING = 'llmgw-router:listening';
/** A worker that dies this soon after starting is broken, not unlucky: stop restarting it. */
const CRASH_LOOP_MS = 2000;

type MetricsRequest = { type: typeof METRICS_REQUEST; id: number };
type MetricsResponse = { type: typeof METRICS_RESPONSE; id: number; text: string; error?: string };

type ListeningMessage = { type: typeof LISTENING; port: number; adminPort: number | undefined };

function isListening(m: unknown): m is ListeningMessage {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === LISTENING;
}
function isMetricsRequest(m: unknown): m is MetricsRequest {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === METRICS_REQUEST;
}
function isMetricsResponse(m: unknown): m is MetricsResponse {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === METRICS_RESPONSE;
}

export interface RouterCluster {
  port: number;
  /** The admin listener every worker shares; undefined when it is off. */
  adminPort: number | undefined;
  pids(): number[];
  /** Every live worker's latest load report (the autoscaler's input). */
  reports(): LoadReport[];
  /** SIGTERM to every worker (each finishes its in-flight requests), resolved when all have exited. */
  close(): Promise<void>;
}

/**
 * In the primary: forks `workers` copies of this very program (they run the same code path and
 * find themselves cluster workers) and resolves once all listen, with their shared port.
 */
export interface ClusterOptions {
  /** Read by the primary alone, its tables sent to every worker (which then use PrimaryRouteSource). */
  routes?: RouteSource;
  /** The primary's own metrics (its Temporal calls), added to what /metrics answers on any worker. */
  registry?: Registry;
  /** The primary's autoscaler: it hears every table, and the workers' held requests. */
  autoscaler?: Autoscaler;
  /** Wakes a sleeping replica for a worker that holds requests for it (one Update per replica for all of them). */
  wake?: WakeCaller | undefined;
}

export async function startRouterCluster(
  workers: number,
  log: (line: string) => void,
  options: ClusterOptions = {},
): Promise<RouterCluster> {
  if (!cluster.isPrimary) throw new Error('startRouterCluster runs in the primary process');
  const aggregator = new AggregatorRegistry();
  let stopping = false;
  const startedAt = new Map<Worker, number>();
  // The first table is read before any worker starts, so that each starts with it.
  const autoscaler = options.autoscaler;
  const broadcaster: RouteBroadcaster | undefined = options.routes
    ? await broadcastRoutes(options.routes, log, autoscaler ? (snapshot) => autoscaler.setTable(snapshot) : undefined)
    : undefined;
  const own = options.registry;
  const reports = new Map<number, { report: LoadReport; at: number }>();

  cluster.on('message', (worker, message: unknown) => {
    if (isLoadMessage(message)) {
      reports.set(worker.id, { report: message.report, at: Date.now() });
      return;
    }
    if (isHoldMessage(message)) {
      autoscaler?.hold(message.model);
      return;
    }
    if (isWakeAsk(message)) {
      answerWake(worker, message, options.wake);
      return;
    }
    if (!isMetricsRequest(message)) return;
    Promise.all([aggregator.clusterMetrics(), own ? own.metrics() : Promise.resolve('')]).then(
      ([workersText, ownText]) =>
        worker.send({
          type: METRICS_RESPONSE,
          id: message.id,
          text: ownText ? `${workersText}\n${ownText}` : workersText,
        } satisfies MetricsResponse),
      (err: unknown) =>
        worker.send({ type: METRICS_RESPONSE, id: message.id, text: '', error: (err as Error).message } satisfies MetricsResponse),
    );
  });

  const fork = (): Worker => {
    const worker = cluster.fork();
    startedAt.set(worker, Date.now());
    return worker;
  };

  let port = 0;
  let adminPort: number | undefined;
  await new Promise<void>((resolve, reject) => {
    let listening = 0;
    const onListening = (_worker: Worker, message: unknown) => {
      if (!isListening(message)) return;
      port = message.port;
      adminPort = message.adminPort;
      if (++listening === workers) {
        cluster.off('message', onListening);
        resolve();
      }
    };
    cluster.on('message', onListening);
    cluster.on('exit', (worker, code, signal) => {
      const lived = Date.now() - (startedAt.get(worker) ?? 0);
      startedAt.delete(worker);
      reports.delete(worker.id);
      if (stopping) return;
      if (listening < workers || lived < CRASH_LOOP_MS) {
        stopping = true;
        reject(new Error(`router worker ${worker.process.pid ?? '?'} exited (${signal ?? code}) ${Math.round(lived)} ms after starting`));
        for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGTERM');
        return;
      }
      log(`router: worker ${worker.process.pid ?? '?'} exited (${signal ?? code}); starting another`);
      fork();
    });
    for (let i = 0; i < workers; i++) fork();
  });

  const live = () => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
  return {
    port,
    adminPort,
    pids: () => live().flatMap((w) => (w.process.pid === undefined ? [] : [w.process.pid])),
    reports: () => [...reports.values()].filter((r) => Date.now() - r.at < REPORT_STALE_MS).map((r) => r.report),
    close: async () => {
      stopping = true;
      const exits = live().map((w) => new Promise<void>((resolve) => (w.isDead() ? resolve() : w.once('exit', () => resolve()))));
      for (const w of live()) w.process.kill('SIGTERM');
      await Promise.all(exits);
      autoscaler?.stop();
      await broadcaster?.stop();
    },
  };
}

/** In a worker: tells the primary that this worker serves, and where. */
export function announceListening(port: number, adminPort: number | undefined): void {
  process.send?.({ type: LISTENING, port, adminPort } satisfies ListeningMessage);
}

/** True in a process forked by startRouterCluster. */
export function isRouterWorker(): boolean {
  return cluster.isWorker;
}

/**
 * In a worker: offers `registry` to the primary's aggregation, and returns what /metrics should
 * answer: every worker's metrics summed (a scrape lands on one worker, but must see them all).
 */
export function clusterMetricsSource(registry: Registry): () => Promise<string> {
  AggregatorRegistry.setRegistries([registry]);
  // Constructing one in a worker installs prom-client's answer to the primary's requests.
  new AggregatorRegistry();
  let next = 0;
  const pending = new Map<number, { resolve(text: string): void; reject(err: Error): void; timer: NodeJS.Timeout }>();
  process.on('message', (message: unknown) => {
    if (!isMetricsResponse(message)) return;
    const waiter = pending.get(message.id);
    if (!waiter) return;
    pending.delete(message.id);
    clearTimeout(waiter.timer);
    if (message.error !== undefined) waiter.reject(new Error(message.error));
    else waiter.resolve(message.text);
  });
  return () =>
    new Promise<string>((resolve, reject) => {
      const id = next++;
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new Error('the router primary did not answer for metrics'));
      }, METRICS_TIMEOUT_MS);
      pending.set(id, { resolve, reject, timer });
      process.send?.({ type: METRICS_REQUEST, id } satisfies MetricsRequest);
    });
}
