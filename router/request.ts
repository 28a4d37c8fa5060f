// The router's request and response objects (node:http's, with the fields one request needs
// on them, so that reading a body allocates no closures) and the body reading itself: bounded
// by the body limit, refused with 413 as soon as it is crossed. Router side.
import { IncomingMessage, ServerResponse } from 'node:http';
import { sendError } from './errors.js';
import type { KeyGate } from './limits.js';
import type { Exchange, ExchangeResponse } from './proxy.js';

/** What reads a whole body hands it to. */
export interface BodyConsumer {
  readonly bodyLimit: number;
  tooLarge(res: ExchangeResponse): void;
  route(req: RouterRequest, res: ExchangeResponse, body: Buffer): void;
}

export class RouterRequest extends IncomingMessage {
  consumer: BodyConsumer | undefined = undefined;
  routerRes: ExchangeResponse | undefined = undefined;
  apiPath = '';
  first: Buffer | undefined = undefined;
  rest: Buffer[] | undefined = undefined;
  size = 0;
  refused = false;
}

export class RouterResponse extends ServerResponse<RouterRequest> implements ExchangeResponse {
  exchange: Exchange | undefined = undefined;
  gate: KeyGate | undefined = undefined;
}

/** A 'close' listener: the request is over, answered or not, so it leaves its key's count. */
export function releaseGate(this: RouterResponse): void {
  this.gate?.release();
  this.gate = undefined;
}

const EMPTY = Buffer.alloc(0);

/** Reads the body of `req` and hands it to `consumer.route`, or refuses it as too large. */
export function readBody(req: RouterRequest, res: ExchangeResponse, path: string, consumer: BodyConsumer): void {
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
    consumer.tooLarge(this.routerRes as ExchangeResponse);
    return;
  }
  if (this.first === undefined) this.first = chunk;
  else (this.rest ??= [this.first]).push(chunk);
}

function onBodyEnd(this: RouterRequest): void {
  if (this.refused) return;
  const body = this.rest ? Buffer.concat(this.rest, this.size) : (this.first ?? EMPTY);
  const res = this.routerRes as ExchangeResponse;
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
