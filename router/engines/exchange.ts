// One request's way through the router once it is parsed and its model is known: pick a
// replica, send the body as it came, pass the answer back chunk by chunk (never buffered,
// backpressure both ways), retry elsewhere on a connection error or 503 before the first byte,
// end a stream cut by a dying engine with an error event, and abort the engine's work when the
// client leaves. Router side. One Exchange object per request is also its undici handler, so
// the hot path allocates no closures.
//
// The handler speaks undici's own hooks (onConnect, onHeaders, onData, onComplete, onError),
// the ones its Client calls: the newer controller hooks are adapted to these per request by a
// wrapper that also parses every header list into an object, twice, which the router does not
// need (it reads three headers from the raw list). undici 7 keeps them; a major upgrade must
// revisit this file.
import type { Dispatcher } from 'undici';
import { pickLeastLoaded } from '../policies/least-loaded.js';
import type { Endpoint } from './endpoint.js';
import { countUsage } from './usage.js';
import { engineErrorBody, sendError, streamErrorEvents, RETRY_AFTER_S } from '../http/errors.js';
import type { ExchangeResponse, RoutedRequest } from './routed-request.js';
import type { ExchangeModel, FlowShares, ProxySettings } from './exchange-parts.js';
import { passedHeaders, classifyUpstreamError, type UpstreamFailure } from './upstream.js';

export type { ExchangeModel, FlowRecorder, FlowShares, ProxySettings } from './exchange-parts.js';

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
  private abortUpstream: ((err?: Error) => void) | undefined = undefined;
  private resume: (() => void) | undefined = undefined;
  private paused = false;
  private clientGone = false;
  private status = 0;
  private sse = false;
  private firstByteAt = 0;
  /** Counted in its endpoint's `prefilling` until the first byte of its body (or its end). */
  private prefilling = false;
  private errorChunks: Buffer[] | undefined = undefined;
  private errorBytes = 0;
  /** How long it waited at the router before it was sent (x-llmgw-queued-ms); -1: it did not. */
  queuedMs = -1;
  /** Where its tenant's requests in flight are counted, from start to finish. */
  private shares: FlowShares | undefined = undefined;

  constructor(
    private readonly settings: ProxySettings,
    private readonly res: ExchangeResponse,
    private model: ExchangeModel,
    private readonly request: RoutedRequest,
  ) {}

  start(): void {
    this.res.exchange = this;
    this.res.on('close', onClientClose);
    this.shares = this.model.queue.shares;
    this.shares?.started(this.request.flow, performance.now());
    this.attempt();
  }

  private attempt(): void {
    const now = performance.now();
    let endpoint = this.model.pick(this.request, this.tried, now);
    // Every replica has been tried: a second go at one beats giving up while attempts remain
    // (a keep-alive race or a replica that just became ready).
    if (endpoint === undefined && this.tried !== undefined) endpoint = pickLeastLoaded(this.model.endpoints, undefined, now);
    if (endpoint === undefined) {
      this.refuse('no_replica', `No replica of model \`${this.model.servedName}\` is ready.`);
      return;
    }
    if (this.attempts === 0) this.settings.flow?.sending(this.model.servedName, this.request, endpoint, now);
    this.attempts++;
    this.endpoint = endpoint;
    this.abortUpstream = undefined;
    this.resume = undefined;
    this.paused = false;
    this.phase = 'waiting';
    endpoint.inflight++;
    endpoint.prefilling++;
    this.prefilling = true;
    endpoint.bytesSent += this.request.body.length;
    endpoint.pool.dispatch({ path: this.request.path, method: 'POST', headers: endpoint.auth.proxy, body: this.request.body }, this);
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortUpstream = abort;
    if (this.clientGone) abort(new Error('client disconnected'));
  }

  onHeaders(statusCode: number, headers: Buffer[], resume: () => void): boolean {
    // 1xx are interim (100 Continue); the real answer follows.
    if (statusCode < 200) return true;
    this.status = statusCode;
    this.resume = resume;
    if (statusCode === 503 && this.attempts < this.settings.maxAttempts) {
      this.phase = 'discarding';
      return true;
    }
    // An engine that lost an adapter (it restarted) before the router's view caught up: elsewhere.
    if (statusCode === 404 && this.model.adapterLost !== undefined && this.attempts < this.settings.maxAttempts) {
      this.model.adapterLost(this.endpoint as Endpoint);
      this.phase = 'discarding';
      return true;
    }
    if (statusCode >= 400) {
      this.phase = 'error-body';
      this.errorChunks = [];
      this.errorBytes = 0;
      return true;
    }
    this.phase = 'passing';
    const endpoint = this.endpoint as Endpoint;
    endpoint.recordSuccess();
    const { type, contentLength, encoding } = passedHeaders(headers);
    this.sse = type.startsWith('text/event-stream');
    const res = this.res;
    if (this.sse) {
      const out = ['content-type', type, 'cache-control', 'no-cache', 'x-accel-buffering', 'no'];
      this.extraHeaders(out, endpoint);
      res.writeHead(statusCode, out);
      // The first chunk usually arrives with the headers and carries them out in one write; if
      // it does not (a long prefill), the client still learns at once that its stream started.
      queueMicrotask(() => {
        if (!res.headersSent && !res.destroyed) res.flushHeaders();
      });
    } else {
      const out = ['content-type', type];
      if (contentLength !== undefined) out.push('content-length', contentLength);
      // Engines do not compress by default; if one does, the client must be told how.
      if (encoding !== undefined) out.push('content-encoding', encoding);
      this.extraHeaders(out, endpoint);
      res.writeHead(statusCode, out);
    }
    return true;
  }

  private extraHeaders(out: string[], endpoint: Endpoint): void {
    // Which engine answered is what an operator asks first when one misbehaves, but a client that
    // learns it can call the engine directly, past keys and limits: only with --debug-headers.
    if (this.settings.debugHeaders) out.push('x-llmgw-endpoint', endpoint.url);
    if (this.queuedMs >= 0) out.push('x-llmgw-queued-ms', String(Math.round(this.queuedMs)));
  }

  onData(chunk: Buffer): boolean {
    switch (this.phase) {
      case 'passing':
        if (this.firstByteAt === 0) {
          this.firstByteAt = performance.now();
          this.settings.flow?.firstByte(this.model.servedName, this.request, this.firstByteAt, this.sse);
        }
        if (this.prefilling) this.prefilled();
        if (this.res.gate !== undefined) countUsage(this.res.gate, chunk);
        if (this.res.write(chunk)) return true;
        // The client's socket is full: undici stops reading the engine until resume().
        this.paused = true;
        this.res.once('drain', onClientDrain);
        return false;
      case 'error-body':
        if (this.errorBytes < MAX_ERROR_BODY) {
          (this.errorChunks as Buffer[]).push(chunk);
          this.errorBytes += chunk.length;
        }
        return true;
      case 'discarding':
      case 'waiting':
      case 'done':
        return true;
    }
  }

  /** The engine has started answering: its prefill of this prompt is over. */
  private prefilled(): void {
    this.prefilling = false;
    (this.endpoint as Endpoint).prefilling--;
  }

  onComplete(): void {
    const endpoint = this.endpoint as Endpoint;
    endpoint.inflight--;
    if (this.prefilling) this.prefilled();
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

  onError(err: Error): void {
    const endpoint = this.endpoint as Endpoint;
    endpoint.inflight--;
    if (this.prefilling) this.prefilled();
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
    const ttft = this.sse && this.firstByteAt !== 0 ? (this.firstByteAt - this.request.startedAt) / 1000 : undefined;
    this.model.metrics.record(status, (now - this.request.startedAt) / 1000, ttft);
    this.shares?.finished(this.request.flow, now);
    this.shares = undefined;
    if (this.model.queue.size > 0) this.settings.released?.(this.model);
  }

  /** The client went away before the answer was complete: stop the engine working for nobody. */
  clientClosed(): void {
    if (this.phase === 'done' || this.clientGone) return;
    this.clientGone = true;
    this.abortUpstream?.(new Error('client disconnected'));
  }

  resumeUpstream(): void {
    if (!this.paused) return;
    this.paused = false;
    this.resume?.();
  }
}

function onClientClose(this: ExchangeResponse): void {
  this.exchange?.clientClosed();
}

function onClientDrain(this: ExchangeResponse): void {
  this.exchange?.resumeUpstream();
}
