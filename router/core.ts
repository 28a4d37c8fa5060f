// What the router does with each request on its public listener: dispatch on the path, check the
// API key and the budgets, read `model` (and the affinity key) from the body, refuse what it must
// in OpenAI's error shape, and hand the rest to an Exchange. Router side; server.ts owns the HTTP
// servers and their lifecycle, admin.ts what the admin listener shows (/metrics, detailed health).
import type { ServerResponse } from 'node:http';
import type { ApiKeys } from './auth.js';
import { DEFAULT_GUARD } from './policies/affinity-table.js';
import { AFFINITY_ON, hashText } from './affinity-settings.js';
import { promptPrefixHash, scanRequest, withModel, NOT_AN_OBJECT } from './body.js';
import { Registry } from 'prom-client';
import { sendError } from './errors.js';
import { RouterMetrics, type ModelMetrics } from './metrics.js';
import { DEFAULT_BODY_LIMIT, type RouterOptions } from './options.js';
import { RoutingState } from './pools.js';
import { Exchange, type ExchangeResponse, type ProxySettings } from './proxy.js';
import { KeyGate } from './limits.js';
import { BUSY_RETRY_AFTER_S, ByteBudget, DEFAULT_HELD_BYTES } from './byte-budget.js';
import { readBody, releaseBytes, releaseGate, sendJson, type BodyConsumer, type RouterRequest, type RouterResponse } from './request.js';
import { RouteRefresher } from './refresher.js';
import { DEFAULT_SCRAPER, Scraper } from './scraper.js';
import { DEFAULT_UPSTREAM, type UpstreamOptions, upstreamHeaders } from './upstream.js';
import { parseKvEventsSpec } from './kv-events.js';
import { reportOf, type LoadReport } from './load-report.js';
import { DEFAULT_QUEUE, WaitingRoom } from './waiting-room.js';
import { AdapterRouter, DEFAULT_ADAPTER_ROUTING } from './adapter-router.js';
import { serveAdapter } from './adapter-serve.js';

const PATH_CHAT = '/v1/chat/completions';
const PATH_COMPLETIONS = '/v1/completions';
const PATH_EMBEDDINGS = '/v1/embeddings';
const SESSION_HEADER = 'x-session-id';
const UNKNOWN_MODEL_LABEL = '(unknown)';

export class RouterCore implements BodyConsumer {
  readonly state: RoutingState;
  readonly metrics: RouterMetrics;
  readonly proxy: ProxySettings;
  readonly bodyLimit: number;
  readonly refresher: RouteRefresher;
  readonly scraper: Scraper;
  readonly waiting: WaitingRoom;
  readonly budget: ByteBudget;
  readonly metricsText: () => Promise<string>;
  private readonly apiKeys: ApiKeys | undefined;
  /** By ApiKey.index. */
  private readonly gates: KeyGate[];
  private readonly unknownModel: ModelMetrics;
  private readonly unauthenticated: ModelMetrics;
  /** LoRA adapters (adapter-router.ts), when the router was given a catalog of them. */
  readonly adapters: AdapterRouter | undefined;

  constructor(options: RouterOptions, log: (line: string) => void) {
    this.metrics = new RouterMetrics(() => this.state.liveEndpoints(), { processMetrics: options.processMetrics ?? false });
    this.waiting = new WaitingRoom(
      { ...DEFAULT_QUEUE, ...options.queue },
      {
        lookup: (model) => this.state.lookup(model),
        proxy: () => this.proxy,
        onHold: (model) => options.onHold?.(model),
      },
      this.metrics.registry,
    );
    const upstream: UpstreamOptions = { ...DEFAULT_UPSTREAM };
    if (options.connectTimeoutMs !== undefined) upstream.connectTimeoutMs = options.connectTimeoutMs;
    if (options.upstreamIdleTimeoutMs !== undefined) upstream.idleTimeoutMs = options.upstreamIdleTimeoutMs;
    this.state = new RoutingState(this.metrics, upstream, {
      affinity: options.affinity ?? AFFINITY_ON,
      guard: options.guard ?? DEFAULT_GUARD,
      policy: options.policy,
      queueFor: (model) => this.waiting.queueFor(model),
      kvEvents: typeof options.kvEvents === 'function' ? options.kvEvents : parseKvEventsSpec(options.kvEvents),
    });
    this.proxy = {
      metrics: this.metrics,
      maxAttempts: options.maxAttempts ?? 3,
      lookup: (model) => this.state.lookup(model) ?? this.adapters?.currentPool(model),
      released: (pool) => this.waiting.drain(pool.servedName),
      debugHeaders: options.debugHeaders ?? false,
      upstreamHeaders: upstreamHeaders(options.engineKey),
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
    this.gates = (options.apiKeys?.keys ?? []).map((key) => new KeyGate(key, this.metrics.forKey(key.label), options.limitShare ?? 1));
    const own = options.extraMetrics ? Registry.merge([this.metrics.registry, options.extraMetrics]) : this.metrics.registry;
    this.metricsText = options.metricsText ?? (() => own.metrics());
    this.unknownModel = this.metrics.forModel(UNKNOWN_MODEL_LABEL);
    this.unauthenticated = this.metrics.forModel('(unauthenticated)');
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
        if (this.authenticate(req, res) === false) return;
        return sendJson(res, 200, this.modelsBody());
      case '/health':
        // For load balancers: whether to send traffic here, nothing about engines or the control
        // plane (that is the admin listener's /health).
        return sendJson(res, 200, JSON.stringify({ status: this.status() }));
      default:
        if (path.startsWith('/v1/models/') && req.method === 'GET') {
          if (this.authenticate(req, res) === false) return;
          let name: string;
          try {
            name = decodeURIComponent(path.slice('/v1/models/'.length));
          } catch {
            return sendError(res, 'invalid_path', `The path ${path} holds a malformed percent-escape.`);
          }
          return this.oneModel(res, name);
        }
        return sendError(res, 'unknown_path', `No route for ${req.method ?? 'GET'} ${path}`);
    }
  }

  private oneModel(res: ServerResponse, name: string): void {
    const pool = this.state.lookup(name);
    const adapter = pool === undefined ? this.adapters?.resolve(name) : undefined;
    if (adapter !== undefined && adapter.base.endpoints.length > 0) {
      const card = {
        id: name,
        object: 'model',
        created: Math.floor(Date.now() / 1000),
        owned_by: 'llmgw',
        root: adapter.spec.source,
        parent: adapter.base.servedName,
      };
      return sendJson(res, 200, JSON.stringify(card));
    }
    // An autoscaled model at zero is still served: its first request wakes it.
    if (!pool || (pool.endpoints.length === 0 && !pool.holds))
      return sendError(res, 'unknown_model', `The model \`${name}\` does not exist or has no ready replica.`);
    sendJson(res, 200, JSON.stringify({ id: pool.servedName, object: 'model', created: Math.floor(Date.now() / 1000), owned_by: 'llmgw' }));
  }

  /** The key's gate; undefined when no keys are configured; false when refused (answered already). */
  private authenticate(req: RouterRequest, res: ServerResponse): KeyGate | undefined | false {
    if (this.apiKeys === undefined) return undefined;
    const key = this.apiKeys.check(req.headers.authorization);
    if (key !== undefined) return this.gates[key.index];
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
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > this.bodyLimit) return this.tooLarge(res);
    // A declared body is reserved whole before a byte of it is read, so that what the router
    // holds can never pass the budget. A client that waits for 100 Continue is answered at once
    // and sends nothing; any other is answered once its body has been read and dropped, since
    // an answer while it still sends would meet a closed connection.
    if (declared !== undefined && !this.reserve(res, Number(declared))) {
      if (expectContinue) return this.busy(res, true);
      req.once('end', () => this.busy(res, false));
      req.resume();
      return;
    }
    if (expectContinue) res.writeContinue();
    readBody(req, res, path, this, declared === undefined ? -1 : Number(declared));
  }

  reserve(res: RouterResponse, bytes: number): boolean {
    if (!this.budget.take(bytes)) return false;
    if (res.budget === undefined) {
      res.budget = this.budget;
      res.on('close', releaseBytes);
    }
    res.reserved += bytes;
    return true;
  }

  busy(res: RouterResponse, closeConnection: boolean): void {
    this.unknownModel.refused(503);
    this.metrics.overBudget();
    const message = `The router holds as many request bodies as it may (${this.budget.limit} bytes); please try again shortly.`;
    sendError(res, 'router_busy', message, closeConnection, BUSY_RETRY_AFTER_S);
  }

  tooLarge(res: ExchangeResponse): void {
    this.unknownModel.refused(413);
    sendError(res, 'body_too_large', `The request body is over the limit of ${this.bodyLimit} bytes.`, true);
  }

  route(req: RouterRequest, res: ExchangeResponse, body: Buffer): void {
    const startedAt = performance.now();
    const fields = scanRequest(body);
    if (typeof fields === 'string') {
      this.unknownModel.refused(400);
      return sendError(
        res,
        'invalid_json',
        fields === NOT_AN_OBJECT ? fields : `We could not parse the JSON body of your request: ${fields}`,
      );
    }
    const model = fields.model;
    if (model === undefined || model === '') {
      this.unknownModel.refused(400);
      return sendError(res, 'missing_model', 'You must provide a model parameter.');
    }
    const pool = this.state.lookup(model);
    if (pool === undefined) {
      const adapter = this.adapters?.resolve(model);
      if (adapter !== undefined && this.adapters !== undefined) {
        const header = req.headers[SESSION_HEADER];
        const session =
          typeof header === 'string' && header !== '' ? hashText(header) : fields.user === undefined ? -1 : hashText(fields.user);
        const prefix = promptPrefixHash(body, fields);
        return serveAdapter(this.adapters, this.proxy, adapter, res, req.url ?? req.apiPath, body, session, prefix, startedAt);
      }
      this.unknownModel.refused(404);
      return sendError(res, 'unknown_model', `The model \`${model}\` does not exist.${this.adapters?.knownAdapters() ?? ''}`);
    }
    const noReplica = pool.endpoints.length === 0;
    // An autoscaled deployment with no replica (at zero, or starting) holds the request and is
    // woken; any other says so at once.
    if (noReplica && !pool.holds) {
      pool.metrics.refused(503);
      return sendError(res, 'no_replica', `No replica of model \`${model}\` is ready yet.`);
    }
    // Cache-aware keys: the session (header, else OpenAI's `user`) and the prompt's start.
    let session = -1;
    let prefix = -1;
    if (pool.policy.name === 'cache-aware') {
      const header = req.headers[SESSION_HEADER];
      if (typeof header === 'string' && header !== '') session = hashText(header);
      else if (fields.user !== undefined) session = hashText(fields.user);
      prefix = promptPrefixHash(body, fields);
    }
    // Addressed by its deployment's name: the engine only knows its served name.
    const upstreamBody = model === pool.servedName ? body : withModel(body, fields, pool.servedNameJson);
    if (noReplica || this.waiting.mustQueue(pool)) {
      const key = res.gate?.key.index ?? -1;
      return this.waiting.hold(pool, res, req.url ?? req.apiPath, upstreamBody, session, prefix, startedAt, key, noReplica);
    }
    new Exchange(this.proxy, res, pool, req.url ?? req.apiPath, upstreamBody, session, prefix, startedAt).start();
  }

  /** The /v1/models body: the routable models, and the adapters of those with a replica (with `parent`). */
  private modelsBody(): string {
    const base = this.state.modelsBody();
    if (this.adapters === undefined) return base;
    const cards = this.adapters.modelCards(Math.floor(Date.now() / 1000));
    if (cards.length === 0) return base;
    const parsed = JSON.parse(base) as { object: string; data: object[] };
    return JSON.stringify({ object: parsed.object, data: [...parsed.data, ...cards] });
  }

  /** What the autoscaler needs from this router process: its waiting lines and the engines' loads. */
  loadReport(): LoadReport {
    return reportOf(this.state.liveEndpoints(), this.waiting.depths());
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
