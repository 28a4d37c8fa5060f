// One request's way through the router once it is parsed and its model is known: pick a
// replica, send the body as it came, pass the answer back chunk by chunk (never buffered,
// backpressure both ways), retry elsewhere on a connection error or 503 before the first byte,
// end a stream cut by a dying engine with an error event, and abort the engine's work when the
// client leaves. Router side. One Exchange object per request is also its undici handler, so
// the hot path allocates no closures.
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Endpoint } from './endpoint.js';
import { engineErrorBody, sendError, streamErrorEvents, RETRY_AFTER_S } from './errors.js';
import type { RouterMetrics } from './metrics.js';
import type { ModelPool } from './pools.js';
import { UPSTREAM_HEADERS, classifyUpstreamError, type UpstreamFailure } from './upstream.js';

type DispatchController = Dispatcher.DispatchController;

/** The router's ServerResponse, carrying its exchange so that module-level listeners find it. */
export interface ExchangeResponse extends ServerResponse {
  exchange: Exchange | undefined;
}

export interface ProxySettings {
  metrics: RouterMetrics;
  /** The current pool for a model: a retry picks from the table as it is now. */
  lookup(model: string): ModelPool | undefined;
  /** Tries per request, the first included. */
  maxAttempts: number;
}

/**
 * `waiting`: sent, no answer yet. `discarding`: a 503 we will retry elsewhere, body ignored.
 * `error-body`: an engine error, read whole to convert it. `passing`: answer going to the client.
 * `done`: finished one way or another.
 */
type Phase = 'waiting' | 'discarding' | 'error-body' | 'passing' | 'done';

const MAX_ERROR_BODY = 64 * 1024;

export class Exchange implements Dispatcher.DispatchHandler {
  private phase: Phase = 'waiting';
  private attempts = 0;
  private tried: Endpoint[] | undefined = undefined;
  private endpoint: Endpoint | undefined = undefined;
  private controller: DispatchController | undefined = undefined;
  private clientGone = false;
  private status = 0;
  private sse = false;
  private firstByteAt = 0;
  private errorChunks: Buffer[] | undefined = undefined;
  private errorBytes = 0;

  constructor(
    private readonly settings: ProxySettings,
    private readonly res: ExchangeResponse,
    private model: ModelPool,
    private readonly path: string,
    private readonly body: Buffer,
    private readonly affinityKey: number,
    private readonly startedAt: number,
  ) {}

  start(): void {
    this.res.exchange = this;
    this.res.on('close', onClientClose);
    this.attempt();
  }

  private attempt(): void {
    const now = performance.now();
    let endpoint = this.model.pick(this.affinityKey, this.tried, now);
    // Every replica has been tried: a second go at one beats giving up while attempts remain
    // (a keep-alive race or a replica that just became ready).
    if (endpoint === undefined && this.tried !== undefined) endpoint = this.model.pick(-1, undefined, now);
    if (endpoint === undefined) {
      this.refuse('no_replica', `No replica of model \`${this.model.servedName}\` is ready.`);
      return;
    }
    this.attempts++;
    this.endpoint = endpoint;
    this.controller = undefined;
    this.phase = 'waiting';
    endpoint.inflight++;
    endpoint.pool.dispatch({ path: this.path, method: 'POST', headers: UPSTREAM_HEADERS, body: this.body }, this);
  }

  onRequestStart(controller: DispatchController): void {
    this.controller = controller;
    if (this.clientGone) controller.abort(new Error('client disconnected'));
  }

  onResponseStart(_controller: DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    this.status = statusCode;
    if (statusCode === 503 && this.attempts < this.settings.maxAttempts) {
      this.phase = 'discarding';
      return;
    }
    if (statusCode >= 400) {
      this.phase = 'error-body';
      this.errorChunks = [];
      this.errorBytes = 0;
      return;
    }
    this.phase = 'passing';
    (this.endpoint as Endpoint).recordSuccess();
    const contentType = headers['content-type'];
    const contentLength = headers['content-length'];
    const type = typeof contentType === 'string' ? contentType : 'application/json';
    this.sse = type.startsWith('text/event-stream');
    const res = this.res;
    if (this.sse) {
      // x-llmgw-endpoint says which engine answered: what an operator asks first when one misbehaves.
      res.writeHead(statusCode, [
        'content-type',
        type,
        'cache-control',
        'no-cache',
        'x-accel-buffering',
        'no',
        'x-llmgw-endpoint',
        (this.endpoint as Endpoint).url,
      ]);
      // The first chunk usually arrives with the headers and carries them out in one write; if
      // it does not (a long prefill), the client still learns at once that its stream started.
      queueMicrotask(() => {
        if (!res.headersSent && !res.destroyed) res.flushHeaders();
      });
    } else {
      const out = ['content-type', type, 'x-llmgw-endpoint', (this.endpoint as Endpoint).url];
      if (typeof contentLength === 'string') out.push('content-length', contentLength);
      // Engines do not compress by default; if one does, the client must be told how.
      const encoding = headers['content-encoding'];
      if (typeof encoding === 'string') out.push('content-encoding', encoding);
      res.writeHead(statusCode, out);
    }
  }

  onResponseData(controller: DispatchController, chunk: Buffer): void {
    switch (this.phase) {
      case 'passing':
        if (this.firstByteAt === 0) this.firstByteAt = performance.now();
        if (!this.res.write(chunk)) {
          controller.pause();
          this.res.once('drain', onClientDrain);
        }
        return;
      case 'error-body':
        if (this.errorBytes < MAX_ERROR_BODY) {
          (this.errorChunks as Buffer[]).push(chunk);
          this.errorBytes += chunk.length;
        }
        return;
      case 'discarding':
      case 'waiting':
      case 'done':
        return;
    }
  }

  onResponseEnd(): void {
    const endpoint = this.endpoint as Endpoint;
    endpoint.inflight--;
    switch (this.phase) {
      case 'discarding':
        this.failedBeforeFirstByte(endpoint, 'status_503');
        return;
      case 'error-body': {
        endpoint.recordSuccess();
        const raw = Buffer.concat(this.errorChunks as Buffer[]).toString('utf8');
        this.errorChunks = undefined;
        const body = engineErrorBody(this.status, raw);
        const headers: Record<string, string | number> = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
        if (this.status === 503) headers['retry-after'] = RETRY_AFTER_S;
        this.res.writeHead(this.status, headers);
        this.res.end(body);
        this.finish(this.status);
        return;
      }
      case 'passing':
        this.res.end();
        this.finish(this.status);
        return;
      case 'waiting':
      case 'done':
        return;
    }
  }

  onResponseError(_controller: DispatchController | undefined, err: Error): void {
    const endpoint = this.endpoint as Endpoint;
    endpoint.inflight--;
    if (this.clientGone) {
      // We aborted it: the client left. 499 is what proxies log for that.
      this.finish(499);
      return;
    }
    switch (this.phase) {
      case 'waiting':
      case 'discarding':
        this.failedBeforeFirstByte(endpoint, classifyUpstreamError(err));
        return;
      case 'error-body':
        this.settings.metrics.upstreamError(endpoint.url, 'mid_stream');
        sendError(this.res, 'upstream_failed', `The engine failed while answering an error: ${err.message}`);
        this.finish(502);
        return;
      case 'passing':
        this.settings.metrics.upstreamError(endpoint.url, 'mid_stream');
        if (endpoint.recordFailure(performance.now())) this.settings.metrics.ejected(endpoint.url);
        if (this.sse) this.res.end(streamErrorEvents(`The engine stopped in the middle of the stream: ${err.message}`));
        // A JSON answer cut short cannot be repaired: a closed connection is the honest signal.
        else this.res.destroy();
        this.finish(502);
        return;
      case 'done':
        return;
    }
  }

  private failedBeforeFirstByte(endpoint: Endpoint, reason: UpstreamFailure): void {
    const { metrics, maxAttempts } = this.settings;
    metrics.upstreamError(endpoint.url, reason);
    // A pool closed under us means the replica left the table, not that its engine failed.
    if (reason !== 'endpoint_closed' && endpoint.recordFailure(performance.now())) metrics.ejected(endpoint.url);
    (this.tried ??= []).push(endpoint);
    if (this.attempts < maxAttempts && !this.clientGone) {
      metrics.retry(reason);
      this.model = this.settings.lookup(this.model.servedName) ?? this.model;
      this.attempt();
      return;
    }
    this.refuse('upstream_unavailable', `No replica of model \`${this.model.servedName}\` could take the request (last: ${reason}).`);
  }

  private refuse(kind: 'no_replica' | 'upstream_unavailable', message: string): void {
    sendError(this.res, kind, message);
    this.finish(503);
  }

  private finish(status: number): void {
    this.phase = 'done';
    this.res.exchange = undefined;
    const now = performance.now();
    const ttft = this.sse && this.firstByteAt !== 0 ? (this.firstByteAt - this.startedAt) / 1000 : undefined;
    this.model.metrics.record(status, (now - this.startedAt) / 1000, ttft);
  }

  /** The client went away before the answer was complete: stop the engine working for nobody. */
  clientClosed(): void {
    if (this.phase === 'done' || this.clientGone) return;
    this.clientGone = true;
    this.controller?.abort(new Error('client disconnected'));
  }

  resumeUpstream(): void {
    this.controller?.resume();
  }
}

function onClientClose(this: ExchangeResponse): void {
  this.exchange?.clientClosed();
}

function onClientDrain(this: ExchangeResponse): void {
  this.exchange?.resumeUpstream();
}
