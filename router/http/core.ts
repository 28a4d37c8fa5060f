// The router's parts, built once, and what it does with each request on its public listener:
// dispatch on the path, check the API key and its limits, reserve the body's bytes, and start
// reading the body, which http/request.ts hands to http/route.ts once it is whole. Router side;
// http/server.ts owns the HTTP servers and their lifecycle, http/admin.ts the admin listener.
import type { ServerResponse } from 'node:http';
import type { ApiKeys } from './auth.js';
import { DEFAULT_GUARD } from '../policies/affinity-table.js';
import { AFFINITY_ON } from '../policies/affinity-settings.js';
import { Registry } from 'prom-client';
import { sendError } from './errors.js';
import { RouterMetrics, type ModelMetrics } from '../metrics.js';
import { DEFAULT_BODY_LIMIT, type RouterOptions } from '../options.js';
import { RoutingState } from '../engines/pools.js';
import type { ProxySettings } from '../engines/exchange.js';
import { KeyGates } from './key-gates.js';
import type { KeyGate } from './limits.js';
import { ByteBudget, DEFAULT_HELD_BYTES } from './byte-budget.js';
import { readBody, releaseBytes, releaseGate, sendJson, type RouterRequest, type RouterResponse } from './request.js';
import { RequestRouter } from './route.js';
import { modelsBody, oneModel } from './models-api.js';
import { RouteRefresher } from '../routes/refresher.js';
import { DEFAULT_SCRAPER, Scraper } from '../engines/scraper.js';
import { DEFAULT_UPSTREAM, type UpstreamOptions } from '../engines/upstream.js';
import { parseKvEventsSpec } from '../kv/events.js';
import { reportOf, type LoadReport } from '../autoscale/load-report.js';
import { DEFAULT_QUEUE, WaitingRoom } from '../flow/waiting-room.js';
import { SleeperWaker } from '../engines/wake.js';
import { hostname } from 'node:os';
import { AdapterRouter, DEFAULT_ADAPTER_ROUTING } from '../adapters/router.js';
import { DEFAULT_PRIORITY, PRIORITY_HEADER, requestClass } from '../flow/priority.js';
import { FilesApi, PATH_FILES, serveFiles } from '../../batches/files-api.js';
import { BatchesApi, PATH_BATCHES, serveBatches } from '../../batches/batches-api.js';

const PATH_CHAT = '/v1/chat/completions';
const PATH_COMPLETIONS = '/v1/completions';
const PATH_EMBEDDINGS = '/v1/embeddings';
const UNKNOWN_MODEL_LABEL = '(unknown)';

/** What both /health answers of a router started with --insecure-routes say, in `insecure`. */
export const INSECURE_ROUTES =
  'routes: unsigned routes are installed (--insecure-routes): anyone who can signal the routes workflow decides where traffic goes';

export class RouterCore {
  readonly state: RoutingState;
  readonly metrics: RouterMetrics;
  readonly proxy: ProxySettings;
  readonly bodyLimit: number;
  readonly refresher: RouteRefresher;
  readonly scraper: Scraper;
  readonly waiting: WaitingRoom;
  readonly budget: ByteBudget;
  readonly metricsText: () => Promise<string>;
  private apiKeys: ApiKeys | undefined;
  private readonly gates: KeyGates;
  private readonly unknownModel: ModelMetrics;
  private readonly unauthenticated: ModelMetrics;
  /** LoRA adapters (adapters/router.ts), when the router was given a catalog of them. */
  readonly adapters: AdapterRouter | undefined;
  /** What a request meets once its body is read (http/route.ts). */
  readonly requests: RequestRouter;
  /** Routes are installed unsigned (--insecure-routes): both /health answers say so. */
  readonly insecure: string | undefined;
  /** /v1/files (batches/files-api.ts), when the router was given a file store. */
  private readonly files: FilesApi | undefined;
  /** /v1/batches (batches/batches-api.ts), when the router has a file store and a Temporal client. */
  private readonly batches: BatchesApi | undefined;

  constructor(options: RouterOptions, log: (line: string) => void) {
    this.metrics = new RouterMetrics(() => this.state.liveEndpoints(), { processMetrics: options.processMetrics ?? false });
    const waker = this.sleeperWaker(options, log);
    this.waiting = new WaitingRoom(
      { ...DEFAULT_QUEUE, ...options.queue },
      {
        lookup: (model) => this.state.lookup(model),
        proxy: () => this.proxy,
        onHold: (model) => options.onHold?.(model),
        ...(waker !== undefined ? { onSleeping: (pool) => waker.ensure(pool) } : {}),
        wakeMetrics: this.metrics.wakes,
        releaseBytes: (res) => {
          const held = res as RouterResponse;
          const bytes = held.reserved;
          releaseBytes.call(held);
          return bytes;
        },
      },
      this.metrics.registry,
    );
    const upstream: UpstreamOptions = { ...DEFAULT_UPSTREAM, engineKey: options.engineKey };
    if (options.connectTimeoutMs !== undefined) upstream.connectTimeoutMs = options.connectTimeoutMs;
    if (options.upstreamIdleTimeoutMs !== undefined) upstream.idleTimeoutMs = options.upstreamIdleTimeoutMs;
    this.state = new RoutingState(this.metrics, upstream, {
      affinity: options.affinity ?? AFFINITY_ON,
      guard: options.guard ?? DEFAULT_GUARD,
      policy: options.policy,
      queueFor: (model) => this.waiting.queueFor(model),
      wakes: waker !== undefined,
      kvEvents: typeof options.kvEvents === 'function' ? options.kvEvents : parseKvEventsSpec(options.kvEvents),
    });
    this.proxy = {
      metrics: this.metrics,
      maxAttempts: options.maxAttempts ?? 3,
      lookup: (model) => this.state.lookup(model) ?? this.adapters?.currentPool(model),
      released: (pool) => this.waiting.drain(pool.servedName),
      debugHeaders: options.debugHeaders ?? false,
      flow: this.waiting,
    };
    this.adapters =
      options.adapters === undefined
        ? undefined
        : new AdapterRouter(
            options.adapters,
            () => this.state.bases(),
            (name) => this.metrics.forModel(name),
            this.metrics.registry,
            { ...DEFAULT_ADAPTER_ROUTING, ...options.adapterRouting },
            log,
          );
    this.budget = new ByteBudget(options.heldBytes ?? DEFAULT_HELD_BYTES);
    this.metrics.watchHeldBytes(() => this.budget.used);
    this.bodyLimit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT;
    this.apiKeys = options.apiKeys;
    this.insecure = options.insecureRoutes ? INSECURE_ROUTES : undefined;
    this.files = options.files === undefined ? undefined : new FilesApi(options.files, log);
    this.batches = options.files && options.batches ? new BatchesApi({ ...options.batches, store: options.files.store }, log) : undefined;
    this.gates = new KeyGates((key) => this.metrics.forKey(key.label), options.limitShare ?? 1);
    if (options.apiKeys) this.gates.replace(options.apiKeys);
    const own = options.extraMetrics ? Registry.merge([this.metrics.registry, options.extraMetrics]) : this.metrics.registry;
    this.metricsText = options.metricsText ?? (() => own.metrics());
    this.unknownModel = this.metrics.forModel(UNKNOWN_MODEL_LABEL);
    this.unauthenticated = this.metrics.forModel('(unauthenticated)');
    this.requests = new RequestRouter({
      metrics: this.metrics,
      proxy: this.proxy,
      waiting: this.waiting,
      budget: this.budget,
      bodyLimit: this.bodyLimit,
      lookup: (model) => this.state.lookup(model),
      adapters: this.adapters,
      unknownModel: this.unknownModel,
    });
    this.refresher = new RouteRefresher(options.source, {
      intervalMs: options.routesIntervalMs ?? 500,
      log,
      apply: (snapshot) => {
        this.state.apply(snapshot.routes, snapshot.deployments);
        // Adapters ride on their bases: a base that came or went changes which adapters resolve.
        this.adapters?.routesChanged();
        const version = snapshot.version === undefined ? '' : ` v${snapshot.version}`;
        log(`router: routes${version} installed: ${this.state.routableModelCount()} model(s), ${this.state.endpointCount()} endpoint(s)`);
        // A replica that became routable takes what waited for it at once.
        this.waiting.drainAll();
        options.onTable?.(snapshot);
      },
    });
    this.scraper = new Scraper(
      () => this.state.liveEndpoints(),
      { ...DEFAULT_SCRAPER, ...(options.scrapeIntervalMs === undefined ? {} : { intervalMs: options.scrapeIntervalMs }) },
      (endpoint) => {
        if (endpoint.recordFailure(performance.now())) this.metrics.ejected(endpoint.url);
      },
      // A scrape may show an engine's line shorter: what waits for a saturated replica may go.
      () => this.waiting.drainAll(),
    );
  }

  /** The waker of sleeping replicas, when this router has a way to ask for a wake. */
  private sleeperWaker(options: RouterOptions, log: (line: string) => void): SleeperWaker | undefined {
    const call = options.wakeReplica;
    if (call === undefined) return undefined;
    const by = `router:${options.routerId ?? `${hostname()}/${process.pid}`}`;
    return new SleeperWaker(call, by, this.metrics.wakes, {
      lookup: (model) => this.state.lookup(model),
      drain: (model) => this.waiting.drain(model),
      failed: (model) => this.waiting.wakeFailed(model),
      log,
    });
  }

  /** `expectContinue`: the client waits for 100 Continue before it sends the body (Expect: 100-continue). */
  handle(req: RouterRequest, res: RouterResponse, expectContinue = false): void {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    switch (path) {
      case PATH_CHAT:
      case PATH_COMPLETIONS:
      case PATH_EMBEDDINGS:
        return this.inference(req, res, path, expectContinue);
      case '/v1/models':
        if (req.method !== 'GET' && req.method !== 'HEAD')
          return sendError(res, 'method_not_allowed', `${req.method ?? ''} is not allowed on ${path}`);
        {
          const gate = this.authenticate(req, res);
          if (gate === false) return;
          return sendJson(res, 200, modelsBody(this.state, this.adapters, gate?.key.scope));
        }
      case '/health':
        // For load balancers: whether to send traffic here, nothing about engines or the control
        // plane (that is the admin listener's /health); but a router that trusts unsigned routes
        // says so wherever anyone looks.
        return sendJson(res, 200, JSON.stringify({ status: this.status(), ...(this.insecure ? { insecure: this.insecure } : {}) }));
      default:
        if (path.startsWith('/v1/models/') && req.method === 'GET') {
          const gate = this.authenticate(req, res);
          if (gate === false) return;
          let name: string;
          try {
            name = decodeURIComponent(path.slice('/v1/models/'.length));
          } catch {
            return sendError(res, 'invalid_path', `The path ${path} holds a malformed percent-escape.`);
          }
          return oneModel(this.state, this.adapters, res, name, gate?.key);
        }
        // The Batch API: its files and its batches, each a key's own.
        if (isUnder(path, PATH_FILES) || isUnder(path, PATH_BATCHES)) {
          const gate = this.authenticate(req, res);
          if (gate === false) return;
          if (isUnder(path, PATH_BATCHES)) return serveBatches(this.batches, req, res, gate?.key);
          return serveFiles(this.files, req, res, gate?.key, expectContinue);
        }
        return sendError(res, 'unknown_path', `No route for ${req.method ?? 'GET'} ${path}`);
    }
  }

  /** Serves these keys from now on (a reloaded keys file, http/key-reload.ts); says what changed. */
  replaceApiKeys(keys: ApiKeys): string {
    this.apiKeys = keys;
    return this.gates.replace(keys);
  }

  /** The key's gate; undefined when no keys are configured; false when refused (answered already). */
  private authenticate(req: RouterRequest, res: ServerResponse): KeyGate | undefined | false {
    if (this.apiKeys === undefined) return undefined;
    const key = this.apiKeys.check(req.headers.authorization);
    const gate = key === undefined ? undefined : this.gates.get(key);
    if (gate !== undefined) return gate;
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

  private inference(req: RouterRequest, res: RouterResponse, path: string, expectContinue: boolean): void {
    if (req.method !== 'POST') return sendError(res, 'method_not_allowed', `${req.method ?? ''} is not allowed on ${path}; use POST`);
    const gate = this.authenticate(req, res);
    if (gate === false) return;
    if (gate !== undefined) {
      const refusal = gate.admit(performance.now());
      if (refusal !== undefined) {
        this.unknownModel.refused(429);
        return sendError(res, 'rate_limited', refusal.message, false, refusal.retryAfterS);
      }
      res.gate = gate;
      res.on('close', releaseGate);
    }
    const flow = requestClass(gate?.key.flow, req.headers[PRIORITY_HEADER]);
    // A malformed header is refused once the body is read (http/route.ts), not here.
    res.priority = flow instanceof Error ? DEFAULT_PRIORITY : flow.priority;
    const declared = req.headers['content-length'];
    const requests = this.requests;
    if (declared !== undefined && Number(declared) > this.bodyLimit) return requests.tooLarge(res);
    // A declared body is reserved whole before a byte of it is read, so that what the router
    // holds can never pass the budget. A client that waits for 100 Continue is answered at once
    // and sends nothing; any other is answered once its body has been read and dropped, since
    // an answer while it still sends would meet a closed connection.
    if (declared !== undefined && !requests.reserve(res, Number(declared))) {
      if (expectContinue) return requests.busy(res, true);
      req.once('end', () => requests.busy(res, false));
      req.resume();
      return;
    }
    if (expectContinue) res.writeContinue();
    readBody(req, res, path, requests, declared === undefined ? -1 : Number(declared));
  }

  /** What the autoscaler needs from this router process: its waiting lines and the engines' loads. */
  loadReport(): LoadReport {
    return reportOf(this.state.liveEndpoints(), this.waiting.depths(), this.waiting.sheddableDepths());
  }

  /**
   * Degraded, still 200: a load balancer that pulled the router out because the control plane
   * is down would turn a control-plane outage into an inference outage.
   */
  status(): 'ok' | 'degraded' {
    const routes = this.refresher.status();
    return routes.state === 'unreachable' || routes.held.length > 0 ? 'degraded' : 'ok';
  }
}

/** Whether `path` is `prefix` or below it. */
function isUnder(path: string, prefix: string): boolean {
  return path === prefix || path.startsWith(`${prefix}/`);
}
