// The router's HTTP front: OpenAI's /v1 routes, /health and /metrics on node:http. It reads and
// parses the request body (for `model` and, with prefix affinity, the prompt's start), refuses
// what it must in OpenAI's error shape, and hands the rest to an Exchange. Router side.
import http, { IncomingMessage, ServerResponse } from 'node:http';
import type { AffinityMode } from './balancer.js';
import { hashText, promptPrefix } from './balancer.js';
import type { ApiKeys } from './auth.js';
import { sendError } from './errors.js';
import type { Registry } from 'prom-client';
import { RouterMetrics, type ModelMetrics } from './metrics.js';
import { RoutingState } from './pools.js';
import { Exchange, type ExchangeResponse, type ProxySettings } from './proxy.js';
import { RouteRefresher, type RouteSource, type SourceStatus } from './routes.js';
import { DEFAULT_SCRAPER, Scraper } from './scraper.js';
import { DEFAULT_UPSTREAM } from './upstream.js';

export interface RouterOptions {
  source: RouteSource;
  /** 0 asks the OS for a port. Default 8080. */
  port?: number;
  host?: string;
  /** Undefined: no authentication. */
  apiKeys?: ApiKeys | undefined;
  /** Deployment or served name → affinity mode. */
  affinity?: ReadonlyMap<string, AffinityMode>;
  bodyLimitBytes?: number;
  /** How often to read the route source. */
  routesIntervalMs?: number;
  scrapeIntervalMs?: number;
  connectTimeoutMs?: number;
  /** Tries per request, the first included. */
  maxAttempts?: number;
  /** Process metrics (CPU, memory, event loop lag) in /metrics; on for the CLI, off in tests. */
  processMetrics?: boolean;
  /** What /metrics answers instead of this router's own registry (a cluster worker: all workers' sum). */
  metricsText?: () => Promise<string>;
  log?: (line: string) => void;
}

export interface RouterHealth {
  status: 'ok' | 'degraded';
  routes: SourceStatus;
  models: number;
  endpoints: number;
  ejected: string[];
}

export interface Router {
  port: number;
  /** This router's prom-client registry. */
  registry: Registry;
  /** Reads the route source now (tests; the router also polls on its own). */
  refreshRoutes(): Promise<void>;
  health(): RouterHealth;
  /** Stops accepting, lets in-flight requests finish for up to `graceMs`, then cuts the rest. */
  close(graceMs?: number): Promise<void>;
}

export const DEFAULT_BODY_LIMIT = 8 * 1024 * 1024;
const PATH_CHAT = '/v1/chat/completions';
const PATH_COMPLETIONS = '/v1/completions';
const PATH_EMBEDDINGS = '/v1/embeddings';
const SESSION_HEADER = 'x-session-id';
const UNKNOWN_MODEL_LABEL = '(unknown)';

class RouterRequest extends IncomingMessage {
  core: RouterCore | undefined = undefined;
  routerRes: ExchangeResponse | undefined = undefined;
  apiPath = '';
  first: Buffer | undefined = undefined;
  rest: Buffer[] | undefined = undefined;
  size = 0;
  refused = false;
}

class RouterResponse extends ServerResponse<RouterRequest> implements ExchangeResponse {
  exchange: Exchange | undefined = undefined;
}

function onBodyData(this: RouterRequest, chunk: Buffer): void {
  if (this.refused) return;
  this.size += chunk.length;
  const core = this.core as RouterCore;
  if (this.size > core.bodyLimit) {
    this.refused = true;
    this.first = undefined;
    this.rest = undefined;
    core.tooLarge(this.routerRes as ExchangeResponse);
    return;
  }
  if (this.first === undefined) this.first = chunk;
  else (this.rest ??= [this.first]).push(chunk);
}

function onBodyEnd(this: RouterRequest): void {
  if (this.refused) return;
  const body = this.rest ? Buffer.concat(this.rest, this.size) : (this.first ?? Buffer.alloc(0));
  const res = this.routerRes as ExchangeResponse;
  try {
    (this.core as RouterCore).route(this, res, body);
  } catch (err) {
    internalError(res, err);
  }
}

/** A bug must cost one request, not the process and every stream it carries. */
function internalError(res: ServerResponse, err: unknown): void {
  sendError(res, 'internal', `internal router error: ${(err as Error).message}`);
}

class RouterCore {
  readonly state: RoutingState;
  readonly metrics: RouterMetrics;
  readonly proxy: ProxySettings;
  readonly bodyLimit: number;
  readonly refresher: RouteRefresher;
  readonly scraper: Scraper;
  private readonly apiKeys: ApiKeys | undefined;
  private readonly metricsText: () => Promise<string>;
  private readonly unknownModel: ModelMetrics;
  private readonly unauthenticated: ModelMetrics;

  constructor(options: RouterOptions, log: (line: string) => void) {
    this.metrics = new RouterMetrics(() => this.inflightViews(), { processMetrics: options.processMetrics ?? false });
    this.state = new RoutingState(
      this.metrics,
      { ...DEFAULT_UPSTREAM, ...(options.connectTimeoutMs === undefined ? {} : { connectTimeoutMs: options.connectTimeoutMs }) },
      options.affinity ?? new Map(),
    );
    this.proxy = { metrics: this.metrics, maxAttempts: options.maxAttempts ?? 3, lookup: (model) => this.state.lookup(model) };
    this.bodyLimit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT;
    this.apiKeys = options.apiKeys;
    this.metricsText = options.metricsText ?? (() => this.metrics.registry.metrics());
    this.unknownModel = this.metrics.forModel(UNKNOWN_MODEL_LABEL);
    this.unauthenticated = this.metrics.forModel('(unauthenticated)');
    this.refresher = new RouteRefresher(options.source, {
      intervalMs: options.routesIntervalMs ?? 500,
      log,
      apply: (entries) => this.state.apply(entries),
    });
    this.scraper = new Scraper(
      () => this.state.liveEndpoints(),
      { ...DEFAULT_SCRAPER, ...(options.scrapeIntervalMs === undefined ? {} : { intervalMs: options.scrapeIntervalMs }) },
      (endpoint) => {
        if (endpoint.recordFailure(performance.now())) this.metrics.ejected(endpoint.url);
      },
    );
  }

  private *inflightViews(): Iterable<{ url: string; inflight: number; ejected: boolean }> {
    for (const e of this.state.liveEndpoints()) yield e;
  }

  handle(req: RouterRequest, res: RouterResponse): void {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    switch (path) {
      case PATH_CHAT:
      case PATH_COMPLETIONS:
      case PATH_EMBEDDINGS:
        return this.inference(req, res, path);
      case '/v1/models':
        if (req.method !== 'GET' && req.method !== 'HEAD')
          return sendError(res, 'method_not_allowed', `${req.method ?? ''} is not allowed on ${path}`);
        if (!this.authorized(req, res)) return;
        return sendJson(res, 200, this.state.modelsBody());
      case '/health':
        return sendJson(res, 200, JSON.stringify(this.health()));
      case '/metrics':
        void this.metricsText().then(
          (text) => {
            res.writeHead(200, { 'content-type': this.metrics.registry.contentType, 'content-length': Buffer.byteLength(text) });
            res.end(text);
          },
          (err: unknown) => sendError(res, 'internal', `metrics: ${(err as Error).message}`),
        );
        return;
      default:
        if (path.startsWith('/v1/models/') && req.method === 'GET') {
          if (!this.authorized(req, res)) return;
          return this.oneModel(res, decodeURIComponent(path.slice('/v1/models/'.length)));
        }
        return sendError(res, 'unknown_path', `No route for ${req.method ?? 'GET'} ${path}`);
    }
  }

  private oneModel(res: ServerResponse, name: string): void {
    const pool = this.state.lookup(name);
    if (!pool || pool.endpoints.length === 0)
      return sendError(res, 'unknown_model', `The model \`${name}\` does not exist or has no ready replica.`);
    sendJson(res, 200, JSON.stringify({ id: pool.servedName, object: 'model', created: Math.floor(Date.now() / 1000), owned_by: 'llmgw' }));
  }

  private authorized(req: RouterRequest, res: ServerResponse): boolean {
    if (this.apiKeys === undefined || this.apiKeys.check(req.headers.authorization)) return true;
    this.unauthenticated.refused(401);
    sendError(
      res,
      'unauthorized',
      req.headers.authorization === undefined
        ? 'Missing API key: send it as `Authorization: Bearer <key>`.'
        : 'Incorrect API key provided.',
    );
    return false;
  }

  private inference(req: RouterRequest, res: RouterResponse, path: string): void {
    if (req.method !== 'POST') return sendError(res, 'method_not_allowed', `${req.method ?? ''} is not allowed on ${path}; use POST`);
    if (!this.authorized(req, res)) return;
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > this.bodyLimit) return this.tooLarge(res);
    req.core = this;
    req.routerRes = res;
    req.apiPath = path;
    req.on('data', onBodyData);
    req.on('end', onBodyEnd);
  }

  tooLarge(res: ExchangeResponse): void {
    this.unknownModel.refused(413);
    sendError(res, 'body_too_large', `The request body is over the limit of ${this.bodyLimit} bytes.`, true);
  }

  route(req: RouterRequest, res: ExchangeResponse, body: Buffer): void {
    const startedAt = performance.now();
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch (err) {
      this.unknownModel.refused(400);
      return sendError(res, 'invalid_json', `We could not parse the JSON body of your request: ${(err as Error).message}`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      this.unknownModel.refused(400);
      return sendError(res, 'invalid_json', 'The request body must be a JSON object.');
    }
    const fields = parsed as Record<string, unknown>;
    const model = fields.model;
    if (typeof model !== 'string' || model === '') {
      this.unknownModel.refused(400);
      return sendError(res, 'missing_model', 'You must provide a model parameter.');
    }
    const pool = this.state.lookup(model);
    if (pool === undefined) {
      this.unknownModel.refused(404);
      return sendError(res, 'unknown_model', `The model \`${model}\` does not exist.`);
    }
    if (pool.endpoints.length === 0) {
      pool.metrics.refused(503);
      return sendError(res, 'no_replica', `No replica of model \`${model}\` is ready yet.`);
    }
    let key = -1;
    if (pool.affinity === 'session') {
      const session = req.headers[SESSION_HEADER];
      if (typeof session === 'string' && session !== '') key = hashText(session);
    } else if (pool.affinity === 'prefix') {
      const prefix = promptPrefix(fields);
      if (prefix !== undefined) key = hashText(prefix);
    }
    // Addressed by its deployment's name: the engine only knows its served name.
    const upstreamBody = model === pool.servedName ? body : Buffer.from(JSON.stringify({ ...fields, model: pool.servedName }));
    new Exchange(this.proxy, res, pool, req.url ?? req.apiPath, upstreamBody, key, startedAt).start();
  }

  health(): RouterHealth {
    const routes = this.refresher.status();
    const ejected: string[] = [];
    let endpoints = 0;
    for (const e of this.state.liveEndpoints()) {
      endpoints++;
      if (e.ejected) ejected.push(e.url);
    }
    // Degraded, still 200: a load balancer that pulled the router out because the control plane
    // is down would turn a control-plane outage into an inference outage.
    return {
      status: routes.state === 'unreachable' ? 'degraded' : 'ok',
      routes,
      models: this.state.routableModelCount(),
      endpoints,
      ejected,
    };
  }
}

function openConnections(server: { getConnections(cb: (err: Error | null, count: number) => void): void }): Promise<number> {
  return new Promise((resolve) => server.getConnections((err, count) => resolve(err ? 0 : count)));
}

function sendJson(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export async function startRouter(options: RouterOptions): Promise<Router> {
  const log = options.log ?? ((line: string) => console.error(line));
  const core = new RouterCore(options, log);
  await core.refresher.start();
  core.scraper.start();
  const syncSourceGauge = setInterval(() => core.metrics.routeSourceUp.set(core.refresher.status().state === 'ok' ? 1 : 0), 1000);
  core.metrics.routeSourceUp.set(core.refresher.status().state === 'ok' ? 1 : 0);
  syncSourceGauge.unref();

  const server = http.createServer<typeof RouterRequest, typeof RouterResponse>(
    {
      IncomingMessage: RouterRequest,
      ServerResponse: RouterResponse,
      noDelay: true,
      // Longer than any client's idle keep-alive, so that we are not the side that races it.
      keepAliveTimeout: 65_000,
      // Receiving the request (headers and body) has a limit; answering it has none, because a
      // long generation must not be cut.
      requestTimeout: 300_000,
      headersTimeout: 60_000,
    },
    (req, res) => {
      try {
        core.handle(req, res);
      } catch (err) {
        internalError(res, err);
      }
    },
  );
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    else socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 8080, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : (options.port ?? 0);

  let closed: Promise<void> | undefined;
  const close = (graceMs = 5000): Promise<void> => {
    closed ??= (async () => {
      clearInterval(syncSourceGauge);
      core.scraper.stop();
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const deadline = Date.now() + graceMs;
      while ((await openConnections(server)) > 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        server.closeIdleConnections();
      }
      server.closeAllConnections();
      await stopped;
      await core.refresher.stop();
      await core.state.close();
    })();
    return closed;
  };

  return { port, registry: core.metrics.registry, refreshRoutes: () => core.refresher.refresh(), health: () => core.health(), close };
}
