// The router's request and response objects (node:http's, with the fields one request needs
// on them, so that reading a body allocates no closures) and the body reading itself: bounded
// by the body limit, refused with 413 as soon as it is crossed, and by the router's byte budget
// for bodies in memory (http/byte-budget.ts). Router side.
import { IncomingMessage, ServerResponse } from 'node:http';
import type { ByteBudget } from './byte-budget.js';
import { sendError } from './errors.js';
import type { KeyGate } from './limits.js';
import type { ExchangeResponse } from '../engines/routed-request.js';

/** What reads a whole body hands it to. */
export interface BodyConsumer {
  readonly bodyLimit: number;
  tooLarge(res: ExchangeResponse): void;
  /** Counts `bytes` more of this request's body against the byte budget; false: they do not fit. */
  reserve(res: RouterResponse, bytes: number): boolean;
  /** Answers a request whose body did not fit the byte budget. */
  busy(res: RouterResponse, closeConnection: boolean): void;
  route(req: RouterRequest, res: RouterResponse, body: Buffer): void;
}

export class RouterRequest extends IncomingMessage {
  consumer: BodyConsumer | undefined = undefined;
  routerRes: RouterResponse | undefined = undefined;
  apiPath = '';
  first: Buffer | undefined = undefined;
  rest: Buffer[] | undefined = undefined;
  /** A declared body of several pieces is copied into this one buffer as they arrive. */
  whole: Buffer | undefined = undefined;
  /** The Content-Length; -1 when the body is chunked. */
  declared = -1;
  size = 0;
  refused = false;
  /** Refused for the byte budget: answered once the rest of the body has been read and dropped. */
  overBudget = false;
}

export class RouterResponse extends ServerResponse<RouterRequest> implements ExchangeResponse {
  exchange: ExchangeResponse['exchange'] = undefined;
  /** The API key's gate (its limits, its scope in `gate.key`); undefined when the router has no keys. */
  gate: KeyGate | undefined = undefined;
  /** The budget this request's body is counted against, and how much of it it holds. */
  budget: ByteBudget | undefined = undefined;
  reserved = 0;
  /** Its priority as far as it is known before its body is read (its key's, lowered by its header): what it may shed for bytes. */
  priority = 0;
}

/** A 'close' listener: the answer is over (or the client left), so the body's bytes go back to the budget. */
export function releaseBytes(this: RouterResponse): void {
  this.budget?.give(this.reserved);
  this.reserved = 0;
  this.budget = undefined;
}

/** A 'close' listener: the request is over, answered or not, so it leaves its key's count. */
export function releaseGate(this: RouterResponse): void {
  this.gate?.release();
  this.gate = undefined;
}

const EMPTY = Buffer.alloc(0);

/** Reads the body of `req` (`declared` bytes, or -1: chunked) and hands it to `consumer.route`, or refuses it. */
export function readBody(req: RouterRequest, res: RouterResponse, path: string, consumer: BodyConsumer, declared: number): void {
  req.declared = declared;
  req.consumer = consumer;
  req.routerRes = res;
  req.apiPath = path;
  req.on('data', onBodyData);
  req.on('end', onBodyEnd);
}

function onBodyData(this: RouterRequest, chunk: Buffer): void {
  if (this.refused) return;
  this.size += chunk.length;
  const consumer = this.consumer as BodyConsumer;
  if (this.size > consumer.bodyLimit) {
    this.refused = true;
    this.first = undefined;
    this.rest = undefined;
    this.whole = undefined;
    consumer.tooLarge(this.routerRes as ExchangeResponse);
    return;
  }
  // A body without a Content-Length (chunked) is counted as it arrives; a declared one was
  // reserved whole before reading began.
  const res = this.routerRes as RouterResponse;
  if (this.size > res.reserved && !consumer.reserve(res, this.size - res.reserved)) {
    this.refused = true;
    this.overBudget = true;
    this.first = undefined;
    this.rest = undefined;
    this.whole = undefined;
    return;
  }
  if (this.first === undefined && chunk.length === this.declared) this.first = chunk;
  else if (this.declared > 0) {
    // Copied into one buffer of the declared size as the pieces arrive, so that a body costs
    // the router its size once, not twice (its pieces, then their concatenation).
    this.whole ??= Buffer.allocUnsafe(this.declared);
    chunk.copy(this.whole, this.size - chunk.length);
  } else if (this.first === undefined) this.first = chunk;
  else (this.rest ??= [this.first]).push(chunk);
}

function onBodyEnd(this: RouterRequest): void {
  if (this.overBudget) (this.consumer as BodyConsumer).busy(this.routerRes as RouterResponse, false);
  if (this.refused) return;
  const body = this.whole ? this.whole.subarray(0, this.size) : this.rest ? Buffer.concat(this.rest, this.size) : (this.first ?? EMPTY);
  this.whole = undefined;
  const res = this.routerRes as RouterResponse;
  try {
    (this.consumer as BodyConsumer).route(this, res, body);
  } catch (err) {
    internalError(res, err);
  }
}

/** A bug must cost one request, not the process and every stream it carries. */
export function internalError(res: ServerResponse, err: unknown): void {
  sendError(res, 'internal', `internal router error: ${(err as Error).message}`);
}

export function sendJson(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
