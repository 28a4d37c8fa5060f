// The fake engine's HTTP front door: finds the route for a path, answers /health, /v1/models
// and /metrics, reads JSON bodies and counts the requests in flight for a graceful close.
// Engine side; the inference routes themselves are inference.ts, the adapter routes lora.ts.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { InferenceRoutes } from './inference.js';
import { healthStatus, type EngineLifecycle } from './lifecycle.js';
import type { LoraAdapters } from './lora.js';
import type { EngineMetrics } from './metrics.js';
import type { FakeEngineOptions } from './options.js';
import { sendError } from './requests.js';
import type { EngineSleep } from './sleep.js';

const MAX_BODY_BYTES = 16 * 1024 * 1024;

/** Inference requests not yet answered, so that a close can wait for them. */
export class InFlight {
  count = 0;
  private onIdle: (() => void) | undefined;

  // One function shared by every inference response, so counting allocates nothing.
  readonly responseClosed = (): void => {
    this.count--;
    if (this.count === 0) this.onIdle?.();
  };

  /** Resolves when nothing is in flight, or after `graceMs`, whichever comes first. */
  async drained(graceMs: number): Promise<void> {
    if (this.count === 0) return;
    await new Promise<void>((resolve) => {
      const grace = setTimeout(resolve, graceMs);
      this.onIdle = () => {
        clearTimeout(grace);
        resolve();
      };
    });
  }
}

export interface EngineHttpParts {
  opts: FakeEngineOptions;
  lifecycle: EngineLifecycle;
  metrics: EngineMetrics;
  routes: InferenceRoutes;
  lora: LoraAdapters | undefined;
  inFlight: InFlight;
  sleep: EngineSleep;
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

export function engineRequestHandler(parts: EngineHttpParts): Handler {
  const { opts, lifecycle, metrics, routes, lora } = parts;
  const modelsBody = modelsList(opts, lora);
  const inference = inferenceHandler(parts);
  const withJson = (req: IncomingMessage, res: ServerResponse, then: (body: unknown) => void) => jsonBody(req, res, lifecycle, then);

  return (req, res) => {
    req.on('error', ignore);
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (path === '/health') {
      if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, 'MethodNotAllowedError', 'Method Not Allowed');
      res.writeHead(healthStatus(lifecycle.state()), { 'content-length': 0 });
      return res.end();
    }
    if (lifecycle.isWorker) return sendError(res, 'NotFoundError', 'A worker rank serves only /health.');
    // vLLM guards /v1/* with --api-key and leaves /health and /metrics open; so does this.
    if (opts.apiKey !== undefined && path.startsWith('/v1') && req.headers.authorization !== `Bearer ${opts.apiKey}`) {
      res.writeHead(401, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: 'Unauthorized' }));
    }
    // vLLM's dev routes, like /health, sit outside /v1 and so outside its --api-key.
    if (parts.sleep.route(path, req, res)) return;
    if (lora?.route(path, req, res, (then) => withJson(req, res, then))) return;
    switch (path) {
      case '/v1/chat/completions':
        return inference(req, res, routes.chat);
      case '/v1/completions':
        return inference(req, res, routes.completions);
      case '/v1/embeddings':
        return inference(req, res, routes.embeddings);
      case '/v1/models': {
        if (req.method !== 'GET') return sendError(res, 'MethodNotAllowedError', 'Method Not Allowed');
        if (!lifecycle.canServe()) return sendError(res, 'ServiceUnavailableError', `The engine is not ready (${lifecycle.state()}).`);
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
}

type Route = (res: ServerResponse, body: unknown) => void;

/** An inference request: counted in flight, refused while the engine cannot serve, then routed. */
function inferenceHandler({ opts, lifecycle, inFlight, sleep }: EngineHttpParts) {
  return (req: IncomingMessage, res: ServerResponse, route: Route): void => {
    if (req.method !== 'POST') return sendError(res, 'MethodNotAllowedError', 'Method Not Allowed');
    if (opts.hang) {
      // The fault being simulated: the connection is accepted and the request never answered.
      req.resume();
      return;
    }
    inFlight.count++;
    res.on('close', inFlight.responseClosed);
    readBody(req, (body) => {
      if (body === TOO_LARGE) return sendError(res, 'PayloadTooLargeError', `request body over ${MAX_BODY_BYTES} bytes`);
      if (!lifecycle.canServe()) {
        return sendError(
          res,
          'ServiceUnavailableError',
          lifecycle.closing ? 'The engine is shutting down.' : `The engine is not ready (${lifecycle.state()}).`,
        );
      }
      let json: unknown;
      try {
        json = JSON.parse(body);
      } catch (err) {
        return sendError(res, 'BadRequestError', `Invalid JSON body: ${(err as Error).message}`);
      }
      // Asleep, vLLM takes the request but schedules nothing until it wakes: it waits.
      if (sleep.sleeping) void sleep.awake().then(() => !res.destroyed && route(res, json));
      else route(res, json);
    });
  };
}

/** A JSON body for the adapter routes, answered like inference while the engine cannot serve. */
function jsonBody(req: IncomingMessage, res: ServerResponse, lifecycle: EngineLifecycle, then: (body: unknown) => void): void {
  readBody(req, (body) => {
    if (body === TOO_LARGE) return sendError(res, 'PayloadTooLargeError', `request body over ${MAX_BODY_BYTES} bytes`);
    if (!lifecycle.canServe()) return sendError(res, 'ServiceUnavailableError', `The engine is not ready (${lifecycle.state()}).`);
    try {
      then(JSON.parse(body));
    } catch (err) {
      sendError(res, 'BadRequestError', `Invalid JSON body: ${(err as Error).message}`);
    }
  });
}

/** The /v1/models body: the served names, and the adapters loaded now. */
function modelsList(opts: FakeEngineOptions, lora: LoraAdapters | undefined): () => string {
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
  return () =>
    lora === undefined ? fixedModelsBody : JSON.stringify({ object: 'list', data: [...baseCards, ...lora.modelCards(created)] });
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
