// The fake engine put together: its prefix cache, metrics, routes, HTTP listener, multi-node
// membership, load and health clocks, and a graceful close. Engine side. Usable in-process
// (tests, benchmarks) through startFakeEngine; main.ts wraps it into the `llmgw fake-engine` process.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { randomBytes } from 'node:crypto';
import type { CompletionContext } from './completion.js';
import { engineRequestHandler, InFlight } from './http.js';
import { inferenceRoutes } from './inference.js';
import { KvEventPublisher, type KvEventsSettings } from './kv-events.js';
import { EngineLifecycle, type EngineState } from './lifecycle.js';
import { LoraAdapters } from './lora.js';
import { EngineMetrics, Slots } from './metrics.js';
import type { FakeEngineOptions } from './options.js';
import { joinLeader, listenForWorkers } from './rendezvous.js';
import { PrefixCache } from './prefix-cache.js';
import { EngineSleep } from './sleep.js';

export interface FakeEngineHooks {
  /** Lines for the shard log (listening, loaded, membership). Silent by default. */
  log?: (line: string) => void;
  /** A worker lost its leader or never reached it; the process should exit. */
  onLeaderLost?: (reason: string) => void;
}

export interface FakeEngine {
  /** The HTTP port; 0 when this node serves no HTTP (a worker started without --port). */
  port: number;
  /** Rank 0 of a multi-node engine: where workers connect. */
  rendezvousPort: number | undefined;
  state(): EngineState;
  /** Its KV-cache event publisher, with --kv-events-config (and a prefix cache). */
  kvEvents: KvEventPublisher | undefined;
  /** Stops accepting, lets in-flight requests finish for up to `graceMs`, then cuts the rest. */
  close(graceMs?: number): Promise<void>;
}

const WORKER_JOIN_SLACK_S = 60;

export async function startFakeEngine(opts: FakeEngineOptions, hooks: FakeEngineHooks = {}): Promise<FakeEngine> {
  const log = hooks.log ?? (() => {});
  const isWorker = opts.nodeRank > 0;
  if (!isWorker && opts.port === undefined) throw new Error('rank 0 needs an HTTP port');
  if (opts.nnodes > 1 && opts.leader === undefined) throw new Error('a multi-node engine needs a leader address');

  const cache =
    opts.prefixCacheBlocks > 0 || opts.prefillTokensPerSecond > 0
      ? new PrefixCache(opts.prefixCacheBlocks, opts.blockSize, opts.prefillTokensPerSecond)
      : undefined;
  const metrics = new EngineMetrics(opts.servedModelNames[0], opts.maxConcurrency, cache);
  const kvEvents =
    cache !== undefined && opts.kvEvents !== undefined && !isWorker
      ? await startKvEvents(opts.kvEvents, opts.blockSize, cache, log)
      : undefined;
  const ctx: CompletionContext = {
    slots: new Slots(opts.maxConcurrency, metrics),
    metrics,
    intervalMs: opts.tokensPerSecond > 0 ? 1000 / opts.tokensPerSecond : 0,
    cache,
  };
  const lifecycle = new EngineLifecycle(opts, log);
  const lora = opts.lora === undefined || isWorker ? undefined : new LoraAdapters(opts.lora, opts.servedModelNames[0]);
  const inFlight = new InFlight();
  const routes = inferenceRoutes(opts, ctx, requestIds(), lora);
  const sleep = new EngineSleep(opts, log);
  // Its memory is taken before it serves, as vLLM's is; on a simulated GPU that cannot hold it, the start fails.
  if (!isWorker) await sleep.allocateAtStart();
  const handle = engineRequestHandler({ opts, lifecycle, metrics, routes, lora, inFlight, sleep });

  // Membership first, so a worker that joins while rank 0 is still binding HTTP is counted.
  if (!isWorker && opts.nnodes > 1 && opts.leader) {
    lifecycle.leader = await listenForWorkers(opts.leader, opts.nnodes, { log, changed: () => lifecycle.announce() });
  }

  let server: http.Server | https.Server | undefined;
  let port = 0;
  if (opts.port !== undefined) {
    try {
      server = await listen(opts.port, opts.host, handle, opts.tls);
    } catch (err) {
      await lifecycle.leader?.close();
      sleep.release();
      throw err;
    }
    const bound = server.address();
    port = typeof bound === 'object' && bound !== null ? bound.port : opts.port;
    log(
      `fake-engine: listening on ${opts.tls ? 'https' : 'http'}://${opts.host}:${port} (rank ${opts.nodeRank} of ${opts.nnodes}, model ${opts.model})`,
    );
  }

  if (isWorker && opts.leader) {
    const deadline = Date.now() + (opts.loadTimeS + WORKER_JOIN_SLACK_S) * 1000;
    lifecycle.worker = joinLeader(opts.leader, opts.nodeRank, deadline, {
      log,
      onJoined: () => lifecycle.announce(),
      onLost: (reason) => {
        if (hooks.onLeaderLost) hooks.onLeaderLost(reason);
        else log(`fake-engine: ${reason}`);
      },
    });
  }

  const timers = startTimers(opts, lifecycle, log);
  let closed: Promise<void> | undefined;
  const close = (graceMs = 2000): Promise<void> =>
    (closed ??= closeEngine({ lifecycle, timers, server, inFlight, kvEvents }, graceMs).finally(() => sleep.release()));
  return { port, rendezvousPort: lifecycle.leader?.port, state: () => lifecycle.state(), kvEvents, close };
}

async function startKvEvents(
  settings: KvEventsSettings,
  blockSize: number,
  cache: PrefixCache,
  log: (line: string) => void,
): Promise<KvEventPublisher> {
  const kvEvents = new KvEventPublisher(settings, blockSize);
  await kvEvents.start();
  cache.listener = kvEvents;
  log(`fake-engine: KV-cache events on ${kvEvents.address}`);
  return kvEvents;
}

/** Response ids unique to this engine run, as vLLM's are: `chatcmpl-<run><counter>`. */
function requestIds(): (prefix: string) => string {
  const idPrefix = randomBytes(6).toString('hex');
  let requestCount = 0;
  return (prefix) => `${prefix}-${idPrefix}${(++requestCount).toString(16)}`;
}

async function listen(
  port: number,
  host: string,
  handle: http.RequestListener,
  tls: FakeEngineOptions['tls'],
): Promise<http.Server | https.Server> {
  const settings = { noDelay: true, keepAliveTimeout: 65_000 };
  // Read at start, as vLLM reads its files: a key the engine cannot read stops it here.
  const server = tls
    ? https.createServer({ ...settings, cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile) }, handle)
    : http.createServer(settings, handle);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}

/** --load-time and --unhealthy-after: the engine turns ready, and later unhealthy, on a clock. */
function startTimers(opts: FakeEngineOptions, lifecycle: EngineLifecycle, log: (line: string) => void): NodeJS.Timeout[] {
  const timers: NodeJS.Timeout[] = [];
  if (opts.loadTimeS > 0) timers.push(setTimeout(() => lifecycle.markLoaded(), opts.loadTimeS * 1000));
  else lifecycle.markLoaded();
  if (opts.unhealthyAfterS !== undefined) {
    timers.push(
      setTimeout(() => {
        lifecycle.unhealthy = true;
        log('fake-engine: reporting unhealthy from now on (--unhealthy-after)');
      }, opts.unhealthyAfterS * 1000),
    );
  }
  return timers;
}

interface Running {
  lifecycle: EngineLifecycle;
  timers: NodeJS.Timeout[];
  server: http.Server | https.Server | undefined;
  inFlight: InFlight;
  kvEvents: KvEventPublisher | undefined;
}

async function closeEngine({ lifecycle, timers, server, inFlight, kvEvents }: Running, graceMs: number): Promise<void> {
  lifecycle.closing = true;
  for (const t of timers) clearTimeout(t);
  lifecycle.worker?.close();
  if (server) {
    const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
    await inFlight.drained(graceMs);
    // What is left is idle keep-alive connections and, with --hang, requests we never answer.
    server.closeAllConnections();
    await stopped;
  }
  await lifecycle.leader?.close();
  kvEvents?.stop();
}
