// The fake engine's HTTP server and lifecycle: loading, health, multi-node membership and the
// vLLM OpenAI-compatible routes. Engine side. Usable in-process (tests, benchmarks) through
// startFakeEngine; main.ts wraps it into the `llmgw fake-engine` process.
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CompletionContext } from './completion.js';
import { inferenceRoutes } from './inference.js';
import { KvEventPublisher } from './kv-events.js';
import { LoraAdapters } from './lora.js';
import { EngineMetrics, Slots } from './metrics.js';
import type { FakeEngineOptions } from './options.js';
import { joinLeader, listenForWorkers, type RendezvousLeader, type RendezvousWorker } from './rendezvous.js';
import { PrefixCache } from './prefix-cache.js';
import { sendError } from './requests.js';

/**
 * `loading`: not loaded yet, or (multi-node) not every worker has joined: /health 503.
 * `ready`: /health 200. `group-broken`: a worker left after the group formed: 503 for good.
 * `unhealthy`: --unhealthy-after passed: /health 500 (inference still answers).
 */
export type EngineState = 'loading' | 'ready' | 'group-broken' | 'unhealthy';

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

const MAX_BODY_BYTES = 16 * 1024 * 1024;
const WORKER_JOIN_SLACK_S = 60;

export async function startFakeEngine(opts: FakeEngineOptions, hooks: FakeEngineHooks = {}): Promise<FakeEngine> {
  const log = hooks.log ?? (() => {});
  const isWorker = opts.nodeRank > 0;
  if (!isWorker && opts.port === undefined) throw new Error('rank 0 needs an HTTP port');
  if (opts.nnodes > 1 && opts.leader === undefined) throw new Error('a multi-node engine needs a leader address');

  const primaryName = opts.servedModelNames[0];
  const cache =
    opts.prefixCacheBlocks > 0 || opts.prefillTokensPerSecond > 0
      ? new PrefixCache(opts.prefixCacheBlocks, opts.blockSize, opts.prefillTokensPerSecond)
      : undefined;
  const metrics = new EngineMetrics(primaryName, opts.maxConcurrency, cache);
  let kvEvents: KvEventPublisher | undefined;
  if (cache !== undefined && opts.kvEvents !== undefined && !isWorker) {
    kvEvents = new KvEventPublisher(opts.kvEvents, opts.blockSize);
    await kvEvents.start();
    cache.listener = kvEvents;
    log(`fake-engine: KV-cache events on ${kvEvents.address}`);
  }
  const ctx: CompletionContext = {
    slots: new Slots(opts.maxConcurrency, metrics),
    metrics,
    intervalMs: opts.tokensPerSecond > 0 ? 1000 / opts.tokensPerSecond : 0,
    cache,
  };
  const idPrefix = randomBytes(6).toString('hex');
  let requestCount = 0;
  const nextId = (prefix: string) => `${prefix}-${idPrefix}${(++requestCount).toString(16)}`;

  let loaded = false;
  let unhealthy = false;
  let closing = false;
  let announcedReady = false;
  let leader: RendezvousLeader | undefined;
  let worker: RendezvousWorker | undefined;
  let inFlight = 0;
  let onIdle: (() => void) | undefined;
  const timers: NodeJS.Timeout[] = [];

  const groupWhole = () => (leader ? leader.complete() && !leader.broken() : true) && (worker ? worker.joined() : true);
  const canServe = () => loaded && !closing && groupWhole();
  const state = (): EngineState => {
    if (unhealthy) return 'unhealthy';
    if (leader?.broken()) return 'group-broken';
    return loaded && groupWhole() ? 'ready' : 'loading';
  };
  const announce = () => {
    if (announcedReady || !loaded || !groupWhole()) return;
    announcedReady = true;
    log(
      isWorker
        ? `fake-engine: rank ${opts.nodeRank} loaded and joined`
        : `fake-engine: loaded ${opts.model}; serving as ${opts.servedModelNames.join(', ')}`,
    );
  };

  const lora = opts.lora === undefined || isWorker ? undefined : new LoraAdapters(opts.lora, primaryName);
  const created = Math.floor(Date.now() / 1000);
  const baseCards = opts.servedModelNames.map((id) => ({
    id,
    object: 'model',
    created,
    owned_by: 'llmgw-fake',
    root: opts.model,
    parent: null,
    max_model_len: opts.maxModelLen,
  }));
  // Adapters come and go, so the list is written per request only on an engine that has them.
  const fixedModelsBody = JSON.stringify({ object: 'list', data: baseCards });
  const modelsBody = () =>
    lora === undefined ? fixedModelsBody : JSON.stringify({ object: 'list', data: [...baseCards, ...lora.modelCards(created)] });

  // Shared by every inference response, so counting in-flight requests allocates nothing.
  const onResponseClosed = () => {
    inFlight--;
    if (inFlight === 0) onIdle?.();
  };

  const { chat, completions, embeddings } = inferenceRoutes(opts, ctx, nextId, lora);

  const inference = (req: IncomingMessage, res: ServerResponse, route: (res: ServerResponse, body: unknown) => void) => {
    if (req.method !== 'POST') return sendError(res, 'MethodNotAllowedError', 'Method Not Allowed');
    if (opts.hang) {
      // The fault being simulated: the connection is accepted and the request never answered.
      req.resume();
      return;
    }
    inFlight++;
    res.on('close', onResponseClosed);
    readBody(req, (body) => {
      if (body === TOO_LARGE) return sendError(res, 'PayloadTooLargeError', `request body over ${MAX_BODY_BYTES} bytes`);
      if (!canServe()) {
        return sendError(
          res,
          'ServiceUnavailableError',
          closing ? 'The engine is shutting down.' : `The engine is not ready (${state()}).`,
        );
      }
      let json: unknown;
      try {
        json = JSON.parse(body);
      } catch (err) {
        return sendError(res, 'BadRequestError', `Invalid JSON body: ${(err as Error).message}`);
      }
      route(res, json);
    });
  };

  /** A JSON body for the adapter routes, answered like inference while the engine cannot serve. */
  const withJson = (req: IncomingMessage, res: ServerResponse, then: (body: unknown) => void) =>
    readBody(req, (body) => {
      if (body === TOO_LARGE) return sendError(res, 'PayloadTooLargeError', `request body over ${MAX_BODY_BYTES} bytes`);
      if (!canServe()) return sendError(res, 'ServiceUnavailableError', `The engine is not ready (${state()}).`);
      try {
        then(JSON.parse(body));
      } catch (err) {
        sendError(res, 'BadRequestError', `Invalid JSON body: ${(err as Error).message}`);
      }
    });

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    req.on('error', ignore);
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (path === '/health') {
      if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, 'MethodNotAllowedError', 'Method Not Allowed');
      res.writeHead(healthStatus(state()), { 'content-length': 0 });
      return res.end();
    }
    if (isWorker) return sendError(res, 'NotFoundError', 'A worker rank serves only /health.');
    // vLLM guards /v1/* with --api-key and leaves /health and /metrics open; so does this.
    if (opts.apiKey !== undefined && path.startsWith('/v1') && req.headers.authorization !== `Bearer ${opts.apiKey}`) {
      res.writeHead(401, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: 'Unauthorized' }));
    }
    if (lora?.route(path, req, res, (then) => withJson(req, res, then))) return;
    switch (path) {
      case '/v1/chat/completions':
        return inference(req, res, chat);
      case '/v1/completions':
        return inference(req, res, completions);
      case '/v1/embeddings':
        return inference(req, res, embeddings);
      case '/v1/models': {
        if (req.method !== 'GET') return sendError(res, 'MethodNotAllowedError', 'Method Not Allowed');
        if (!canServe()) return sendError(res, 'ServiceUnavailableError', `The engine is not ready (${state()}).`);
        const body = modelsBody();
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        return res.end(body);
      }
      case '/metrics': {
        if (req.method !== 'GET') return sendError(res, 'MethodNotAllowedError', 'Method Not Allowed');
        const text = lora === undefined ? metrics.render() : metrics.render() + lora.metricsText();
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8', 'content-length': Buffer.byteLength(text) });
        return res.end(text);
      }
      default:
        return sendError(res, 'NotFoundError', `No route for ${req.method ?? 'GET'} ${path}`);
    }
  };

  // Membership first, so a worker that joins while rank 0 is still binding HTTP is counted.
  if (!isWorker && opts.nnodes > 1 && opts.leader) {
    leader = await listenForWorkers(opts.leader, opts.nnodes, { log, changed: announce });
  }

  let server: http.Server | undefined;
  let port = 0;
  if (opts.port !== undefined) {
    const s = http.createServer({ noDelay: true, keepAliveTimeout: 65_000 }, handle);
    server = s;
    try {
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(opts.port, opts.host, () => {
          s.off('error', reject);
          resolve();
        });
      });
    } catch (err) {
      await leader?.close();
      throw err;
    }
    const bound = s.address();
    port = typeof bound === 'object' && bound !== null ? bound.port : (opts.port ?? 0);
    log(`fake-engine: listening on http://${opts.host}:${port} (rank ${opts.nodeRank} of ${opts.nnodes}, model ${opts.model})`);
  }

  if (isWorker && opts.leader) {
    const deadline = Date.now() + (opts.loadTimeS + WORKER_JOIN_SLACK_S) * 1000;
    worker = joinLeader(opts.leader, opts.nodeRank, deadline, {
      log,
      onJoined: announce,
      onLost: (reason) => {
        if (hooks.onLeaderLost) hooks.onLeaderLost(reason);
        else log(`fake-engine: ${reason}`);
      },
    });
  }

  const markLoaded = () => {
    loaded = true;
    announce();
  };
  if (opts.loadTimeS > 0) timers.push(setTimeout(markLoaded, opts.loadTimeS * 1000));
  else markLoaded();
  if (opts.unhealthyAfterS !== undefined) {
    timers.push(
      setTimeout(() => {
        unhealthy = true;
        log('fake-engine: reporting unhealthy from now on (--unhealthy-after)');
      }, opts.unhealthyAfterS * 1000),
    );
  }

  let closed: Promise<void> | undefined;
  const close = (graceMs = 2000): Promise<void> => {
    closed ??= (async () => {
      closing = true;
      for (const t of timers) clearTimeout(t);
      worker?.close();
      if (server) {
        const s = server;
        const stopped = new Promise<void>((resolve) => s.close(() => resolve()));
        if (inFlight > 0) {
          await new Promise<void>((resolve) => {
            const grace = setTimeout(resolve, graceMs);
            onIdle = () => {
              clearTimeout(grace);
              resolve();
            };
          });
        }
        // What is left is idle keep-alive connections and, with --hang, requests we never answer.
        s.closeAllConnections();
        await stopped;
      }
      await leader?.close();
      kvEvents?.stop();
    })();
    return closed;
  };

  return { port, rendezvousPort: leader?.port, state, kvEvents, close };
}

function healthStatus(state: EngineState): number {
  switch (state) {
    case 'ready':
      return 200;
    case 'loading':
    case 'group-broken':
      return 503;
    case 'unhealthy':
      return 500;
  }
}

function ignore(): void {}

const TOO_LARGE = Symbol('too large');

function readBody(req: IncomingMessage, then: (body: string | typeof TOO_LARGE) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size <= MAX_BODY_BYTES) chunks.push(chunk);
  });
  req.on('end', () => {
    if (size > MAX_BODY_BYTES) return then(TOO_LARGE);
    then(chunks.length === 1 ? (chunks[0] as Buffer).toString('utf8') : Buffer.concat(chunks).toString('utf8'));
  });
}
