// Where a request is routed, once its body has been read (http/request.ts hands it here): read
// `model` and the cache-aware keys from the body, find the deployment (or LoRA adapter) it names,
// refuse what cannot be served in OpenAI's error shape, build the one RoutedRequest the later
// stages share, and send it: now (an Exchange), after a wait (the waiting room), or once its
// adapter is loaded. Router side; http/core.ts admits the request before its body is read.
import { serveAdapter, type AdapterServing, type AdapterTarget } from '../adapters/serve.js';
import type { ProxySettings } from '../engines/exchange.js';
import { ANONYMOUS_CLASS, PRIORITY_HEADER, requestClass, type FlowClass } from '../flow/priority.js';
import { parseDeadline, type Deadline } from '../flow/deadline.js';
import type { ModelPool } from '../engines/model-pool.js';
import type { ExchangeResponse, RoutedRequest } from '../engines/routed-request.js';
import type { WaitingRoom } from '../flow/waiting-room.js';
import { promptPrefixHash, sessionHash } from '../kv/hashing.js';
import type { ModelMetrics, RouterMetrics } from '../metrics.js';
import { NOT_AN_OBJECT, scanRequest, withModel, type RequestFields } from './body.js';
import { BUSY_RETRY_AFTER_S, type ByteBudget } from './byte-budget.js';
import { sendError } from './errors.js';
import { allowsAdapter, allowsModel, outOfScopeMessage } from './key-scope.js';
import { releaseBytes, type BodyConsumer, type RouterRequest, type RouterResponse } from './request.js';

const SESSION_HEADER = 'x-session-id';

/** What routing asks of the adapter router (adapters/router.ts): which adapter a name is, and serving it. */
export interface RoutedAdapters extends AdapterServing {
  resolve(model: string): AdapterTarget | undefined;
  /** For a 404: the adapters the catalog lists, as a sentence; empty when none. */
  knownAdapters(): string;
}

/** What routing needs from the router around it (http/core.ts builds it). */
export interface RoutingParts {
  readonly metrics: RouterMetrics;
  readonly proxy: ProxySettings;
  readonly waiting: WaitingRoom;
  readonly budget: ByteBudget;
  readonly bodyLimit: number;
  /** Deployments by name or served name. */
  lookup(model: string): ModelPool | undefined;
  readonly adapters: RoutedAdapters | undefined;
  /** Requests refused before their model was known. */
  readonly unknownModel: ModelMetrics;
}

export class RequestRouter implements BodyConsumer {
  readonly bodyLimit: number;

  constructor(private readonly parts: RoutingParts) {
    this.bodyLimit = parts.bodyLimit;
  }

  route(req: RouterRequest, res: RouterResponse, body: Buffer): void {
    const startedAt = performance.now();
    const { parts } = this;
    const fields = scanRequest(body);
    if (typeof fields === 'string') {
      parts.unknownModel.refused(400);
      const message = fields === NOT_AN_OBJECT ? fields : `We could not parse the JSON body of your request: ${fields}`;
      return sendError(res, 'invalid_json', message);
    }
    const model = fields.model;
    if (model === undefined || model === '') {
      parts.unknownModel.refused(400);
      return sendError(res, 'missing_model', 'You must provide a model parameter.');
    }
    const path = req.url ?? req.apiPath;
    const pool = parts.lookup(model);
    const adapter = pool === undefined ? parts.adapters?.resolve(model) : undefined;
    // A scoped key is refused what it may not use here, first: before the request can be held
    // (and its deployment woken from zero), load an adapter, or reach an engine.
    const gate = res.gate;
    const scope = gate?.key.scope;
    if (gate !== undefined && scope !== undefined) {
      const allowed = pool !== undefined ? allowsModel(scope, pool) : adapter !== undefined && allowsAdapter(scope, adapter.spec.name);
      if (!allowed) {
        parts.unknownModel.refused(404);
        gate.metrics.outOfScope.inc();
        return sendError(res, 'unknown_model', outOfScopeMessage(gate.key.id, scope, model));
      }
    }
    if (pool === undefined) {
      if (adapter !== undefined && parts.adapters !== undefined)
        return serveAdapter(
          parts.adapters,
          parts.proxy,
          adapter,
          res,
          routed(req, path, body, body, fields, startedAt, true, gate?.key.flow ?? ANONYMOUS_CLASS, undefined),
        );
      parts.unknownModel.refused(404);
      return sendError(res, 'unknown_model', `The model \`${model}\` does not exist.${parts.adapters?.knownAdapters() ?? ''}`);
    }
    const noReplica = pool.endpoints.length === 0;
    // An autoscaled deployment with no replica (at zero, or starting) holds the request and is
    // woken; any other says so at once.
    if (noReplica && !pool.holds) {
      pool.metrics.refused(503);
      return sendError(res, 'no_replica', `No replica of model \`${model}\` is ready yet.`);
    }
    const flow = requestClass(gate?.key.flow, req.headers[PRIORITY_HEADER]);
    const deadline = parseDeadline(req.headers);
    if (flow instanceof Error || deadline instanceof Error) {
      pool.metrics.refused(400);
      return sendError(res, 'invalid_flow_header', (flow instanceof Error ? flow : (deadline as Error)).message);
    }
    // Addressed by its deployment's name: the engine only knows its served name.
    const upstreamBody = model === pool.servedName ? body : withModel(body, fields, pool.servedNameJson);
    const request = routed(req, path, body, upstreamBody, fields, startedAt, pool.policy.name === 'cache-aware', flow, deadline);
    parts.waiting.admit(pool, res, request, noReplica);
  }

  reserve(res: RouterResponse, bytes: number): boolean {
    const { budget } = this.parts;
    // Out of bytes: requests held of a lower priority give theirs up first (flow/waiting-room.ts).
    if (!budget.take(bytes) && !(this.parts.waiting.shedForBytes(res.priority, bytes - (budget.limit - budget.used)) && budget.take(bytes)))
      return false;
    if (res.budget === undefined) {
      res.budget = budget;
      res.on('close', releaseBytes);
    }
    res.reserved += bytes;
    return true;
  }

  busy(res: RouterResponse, closeConnection: boolean): void {
    this.parts.unknownModel.refused(503);
    this.parts.metrics.overBudget();
    const message = `The router holds as many request bodies as it may (${this.parts.budget.limit} bytes); please try again shortly.`;
    sendError(res, 'router_busy', message, closeConnection, BUSY_RETRY_AFTER_S);
  }

  tooLarge(res: ExchangeResponse): void {
    this.parts.unknownModel.refused(413);
    sendError(res, 'body_too_large', `The request body is over the limit of ${this.bodyLimit} bytes.`, true);
  }
}

/**
 * The request as later stages see it (`body`: as sent on). Its cache-aware keys are hashed here,
 * once, and only when they will be used (`keyed`): the session (x-session-id, else OpenAI's `user`) and the
 * prompt's first bytes as the client sent them (the prefix is the same whichever name it used).
 */
function routed(
  req: RouterRequest,
  path: string,
  received: Buffer,
  body: Buffer,
  fields: RequestFields,
  startedAt: number,
  keyed: boolean,
  flow: FlowClass,
  deadline: Deadline | undefined,
): RoutedRequest {
  const request = { path, body, session: -1, prefix: -1, startedAt, flow, deadline, eligible: undefined, predictedTtftMs: -1 };
  if (!keyed) return request;
  // `fields` are positions in the body as received, before the model name was replaced.
  request.session = sessionHash(req.headers[SESSION_HEADER], fields.user);
  request.prefix = promptPrefixHash(received, fields);
  return request;
}
