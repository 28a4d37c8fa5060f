// Where the router holds requests instead of refusing them or piling them onto engines: for an
// autoscaled deployment with no routable replica (at zero, or starting: the first request wakes
// it), for a model whose replicas all sleep (engines/wake.ts wakes one), and for any deployment
// whose every replica is saturated (flow control). Requests leave by priority, then fairly across
// tenants (flow/queue.ts), as a replica has room (flow/room.ts); one that asks a deadline it is
// predicted to miss is refused at once (flow/deadline.ts). Bounded in count and wait per
// deployment; over either limit a clean 429 or 503 with Retry-After, the lowest priority first.
// Router side.
import type { Registry } from 'prom-client';
import type { Endpoint } from '../engines/endpoint.js';
import type { ModelPool } from '../engines/model-pool.js';
import { Exchange, type FlowRecorder, type ProxySettings } from '../engines/exchange.js';
import { ModelQueue, type Fairness, type Held, type HoldReason } from './queue.js';
import type { ExchangeResponse, RoutedRequest } from '../engines/routed-request.js';
import type { WakeMetrics } from '../metrics.js';
import { FlowMetrics } from './flow-metrics.js';
import { Refusals, type HeldErrorKind, type HeldOutcome } from './refusals.js';
import { depthsOf, linesOf, lowestBelow, sheddableDepthsOf, type LineView } from './line-views.js';

export type { LineView } from './line-views.js';
import { contentionOf, DEFAULT_KEPT_SHARE, hasRoom, lineWaitMs, nextToSend, standingOf } from './room.js';
import { meeting, predictTtftMs } from './deadline.js';

export interface QueueSettings {
  /** Requests one router process holds per deployment (served name). */
  maxPerModel: number;
  /** How long a request may wait before it is answered 503. */
  maxWaitMs: number;
  /** An engine with this many requests waiting takes no more; undefined turns flow control off. */
  saturatedWaiting: number | undefined;
  /** How one priority's requests share the line: by tenant weight (the default) or first come first served. */
  fairness: Fairness;
  /** The share of each engine's slots kept, while contended, for critical requests and tenants below their share. */
  keptShare: number;
}

export const DEFAULT_QUEUE: QueueSettings = {
  maxPerModel: 1000,
  maxWaitMs: 300_000,
  saturatedWaiting: 8,
  fairness: 'weighted',
  keptShare: DEFAULT_KEPT_SHARE,
};

/** How often a router process says again that it holds requests for a deployment with no replica. */
const NOTIFY_EVERY_MS = 1000;

export interface WaitingRoomHooks {
  /** The model's current pool (tables change while requests wait). */
  lookup(model: string): ModelPool | undefined;
  /** How requests are sent (the router's proxy settings). */
  proxy(): ProxySettings;
  /** Requests are held for a model with no routable replica: wake its deployment. */
  onHold(model: string): void;
  /** Requests are held for a model whose replicas all sleep: wake one (engines/wake.ts); undefined: this router cannot. */
  onSleeping?(pool: ModelPool): void;
  /** Where requests held for a wake are counted and timed. */
  readonly wakeMetrics?: WakeMetrics;
  /** Gives a request's body bytes back to the router's budget now; how many it held. */
  releaseBytes?(res: ExchangeResponse): number;
}

export class WaitingRoom implements FlowRecorder {
  private readonly queues = new Map<string, ModelQueue>();
  private readonly notifiedAt = new Map<string, number>();
  private total = 0;
  readonly metrics: FlowMetrics;
  private readonly refusals: Refusals;

  constructor(
    readonly settings: QueueSettings,
    private readonly hooks: WaitingRoomHooks,
    registry: Registry,
  ) {
    this.metrics = new FlowMetrics(registry, this.queues);
    this.refusals = new Refusals(this.metrics, hooks.wakeMetrics);
  }

  /** Requests held in this process, by model. */
  depths(): Record<string, number> {
    return depthsOf(this.queues);
  }

  /** Held requests of sheddable priority, by model (the autoscaler may leave them out). */
  sheddableDepths(): Record<string, number> {
    return sheddableDepthsOf(this.queues);
  }

  /** The lines as the admin /health shows them. */
  lines(): Record<string, LineView> {
    return linesOf(this.queues);
  }

  queueFor(model: string): ModelQueue {
    let q = this.queues.get(model);
    if (q === undefined) {
      q = new ModelQueue(model, this.settings.fairness);
      this.queues.set(model, q);
    }
    return q;
  }

  /**
   * A request for `pool`, its body read: sent now to a replica with room for it, held, or refused
   * at once when it asks a deadline no replica is predicted to meet. `noReplica`: the pool has
   * no routable replica (held for one to exist).
   */
  admit(pool: ModelPool, res: ExchangeResponse, request: RoutedRequest, noReplica: boolean): void {
    const q = pool.queue;
    const now = performance.now();
    q.shares.seen(request.flow, now);
    if (noReplica) return this.hold(pool, res, request, true);
    const threshold = this.settings.saturatedWaiting;
    const contention = contentionOf(q.shares, pool.endpoints, now);
    const standing = standingOf(q.shares, request.flow, contention);
    const room = (e: Endpoint) => hasRoom(e, this.settings, contention, standing);
    // No jumping the line: with requests held, this one takes its place among them.
    const sendNow = q.size === 0 && (threshold === undefined || pool.endpoints.some(room));
    if (request.deadline !== undefined) {
      const lineMs = sendNow ? 0 : lineWaitMs(q, pool.endpoints, this.settings, request.flow, contention, standing);
      const candidates = sendNow ? pool.endpoints.filter(room) : pool.endpoints;
      const verdict = meeting(request.deadline, candidates, request.body.length, lineMs);
      if (verdict.meets.length === 0)
        return this.refusals.refuseDeadline(pool.servedName, res, request, verdict.bestTtftMs, verdict.bestTpotMs);
      if (sendNow) request.eligible = (e) => verdict.meets.includes(e);
    } else if (sendNow && contention.contended) request.eligible = room;
    if (!sendNow) return this.hold(pool, res, request, false);
    new Exchange(this.hooks.proxy(), res, pool, request).start();
  }

  /** Holds a request (`noReplica`: for a replica to exist; else for one with room), or refuses it (or a lower one) when the line is full. */
  hold(pool: ModelPool, res: ExchangeResponse, request: RoutedRequest, noReplica: boolean): void {
    const q = pool.queue;
    const model = pool.servedName;
    const reason: HoldReason = noReplica ? (pool.sleepers.length > 0 ? 'sleeping' : 'no_replica') : 'saturated';
    const held: Held = { model, res, request, heldAt: performance.now(), reason, timer: undefined, line: undefined, tag: 0, cost: 0 };
    if (q.size >= this.settings.maxPerModel) {
      // The lowest priority is refused first (a newcomer above it takes its place), then, at the
      // newcomer's own priority, the tenant holding the most of the line for its weight.
      const victim = q.victimFor(request.flow);
      if (victim === undefined) return this.refusals.refuse(held, 'full');
      q.remove(victim);
      this.leave(victim);
      this.refusals.refuse(victim, victim.request.flow.priority < request.flow.priority ? 'shed' : 'shed_share');
    }
    q.push(held);
    this.total++;
    this.metrics.held.inc({ model, reason: held.reason });
    const ttft = request.deadline?.ttftMs;
    const left = ttft === undefined ? Infinity : ttft - (held.heldAt - request.startedAt);
    held.timer = setTimeout(() => this.expire(held), Math.max(0, Math.min(this.settings.maxWaitMs, left)));
    held.timer.unref();
    held.res.once('close', () => this.gone(held));
    if (held.reason === 'sleeping') {
      this.hooks.wakeMetrics?.heldFor(model);
      this.hooks.onSleeping?.(pool);
    } else if (held.reason === 'no_replica') this.notify(model);
    // Queued behind others while a replica may have room (since the last event): try now.
    else this.drain(model);
  }

  /**
   * The router's budget for bodies is spent and a request of `priority` needs `bytes` more:
   * held requests of a lower priority, across every line, are refused (the newest of the
   * lowest first) and their bytes given back, until enough is free. True when it is.
   */
  shedForBytes(priority: number, bytes: number): boolean {
    const release = this.hooks.releaseBytes;
    if (release === undefined) return false;
    let freed = 0;
    while (freed < bytes) {
      const lowest = lowestBelow(this.queues, priority);
      if (lowest === undefined || lowest.line === undefined) return false;
      lowest.line.remove(lowest);
      this.leave(lowest);
      this.refusals.refuse(lowest, 'shed');
      freed += release(lowest.res);
    }
    return true;
  }

  /** Sends what can be sent now, for every model with requests waiting. */
  drainAll(): void {
    if (this.total === 0) return;
    for (const model of [...this.queues.keys()]) this.drain(model);
  }

  drain(model: string): void {
    const q = this.queues.get(model);
    if (q === undefined || q.size === 0) {
      if (q !== undefined && this.hooks.lookup(model) === undefined) this.queues.delete(model);
      return;
    }
    const pool = this.hooks.lookup(model);
    if (pool === undefined) {
      for (const held of q.takeAll()) this.answer(held, 'removed', 'unknown_model', `The model \`${model}\` no longer exists.`);
      this.queues.delete(model);
      return;
    }
    if (pool.endpoints.length === 0) {
      if (!pool.holds) {
        for (const held of q.takeAll()) this.answer(held, 'timeout', 'no_replica', `No replica of model \`${model}\` is ready.`);
      } else if (pool.sleepers.length > 0) this.hooks.onSleeping?.(pool);
      else this.notify(model);
      return;
    }
    const now = performance.now();
    const contention = contentionOf(q.shares, pool.endpoints, now);
    while (q.size > 0) {
      const held = nextToSend(q, pool.endpoints, this.settings, contention);
      if (held === undefined) return;
      this.leave(held);
      const queuedMs = now - held.heldAt;
      this.refusals.observe(held, 'sent', queuedMs);
      this.metrics.waited(model, held.request.flow, queuedMs / 1000);
      const exchange = new Exchange(this.hooks.proxy(), held.res, pool, held.request);
      exchange.queuedMs = queuedMs;
      exchange.start();
    }
  }

  /** Its first attempt goes to `endpoint`: what its first token is predicted to take, from its arrival. */
  sending(_model: string, request: RoutedRequest, endpoint: Endpoint, now: number): void {
    request.predictedTtftMs = now - request.startedAt + predictTtftMs(endpoint, request.body.length);
  }

  firstByte(model: string, request: RoutedRequest, at: number, sse: boolean): void {
    const actualMs = at - request.startedAt;
    // A whole answer's first byte is its last token: only a stream's says when the first came.
    if (sse && request.predictedTtftMs >= 0) this.metrics.predicted(model, request.predictedTtftMs, actualMs);
    const ttft = request.deadline?.ttftMs;
    // A whole answer in time met it for sure; one late may still have had its first token in time.
    if (ttft !== undefined && (sse || actualMs <= ttft)) this.metrics.deadline(model, request.flow, actualMs <= ttft ? 'met' : 'missed');
  }

  /**
   * The wake of the model's sleeping replica failed (engines/wake.ts): what waits for it is
   * answered as a hold past its bound is, 503 and the same words, with the reason added.
   */
  wakeFailed(model: string): void {
    const q = this.queues.get(model);
    if (q === undefined) return;
    for (const held of q.takeAll()) {
      const waited = Math.round((performance.now() - held.heldAt) / 1000);
      const message = `The request waited ${waited} s for a replica of model \`${model}\` and was not sent: its sleeping replica could not be woken.`;
      this.answer(held, 'timeout', 'queue_timeout', message);
    }
  }

  /** The router is stopping: everything still waiting is answered 503 (retry elsewhere), not cut. */
  closeAll(): void {
    for (const q of this.queues.values()) {
      for (const held of q.takeAll()) this.answer(held, 'stopping', 'router_stopping', 'The router is restarting; please try again.');
    }
  }

  /** Rate-limited: a line that keeps waiting says so again each second, so a lost wake is retried. */
  private notify(model: string): void {
    const now = performance.now();
    const last = this.notifiedAt.get(model);
    if (last !== undefined && now - last < NOTIFY_EVERY_MS) return;
    this.notifiedAt.set(model, now);
    this.hooks.onHold(model);
  }

  private leave(held: Held): void {
    this.total--;
    if (held.timer !== undefined) clearTimeout(held.timer);
    held.timer = undefined;
  }

  /** Its bound passed while it waited: the line's longest wait, or its own deadline for a first token. */
  private expire(held: Held): void {
    if (held.line === undefined || !held.line.remove(held)) return;
    const ttft = held.request.deadline?.ttftMs;
    const waitedMs = performance.now() - held.heldAt;
    this.leave(held);
    if (ttft !== undefined && waitedMs < this.settings.maxWaitMs) return this.refusals.deadlinePassed(held, ttft, waitedMs);
    const waited = Math.round(this.settings.maxWaitMs / 1000);
    this.refusals.answer(
      held,
      'timeout',
      'queue_timeout',
      `The request waited ${waited} s for a replica of model \`${held.model}\` and was not sent.`,
    );
  }

  private gone(held: Held): void {
    if (held.line === undefined || !held.line.remove(held)) return;
    this.leave(held);
    this.refusals.observe(held, 'gone', performance.now() - held.heldAt);
  }

  /** Answers a request already taken off its line with an error. */
  private answer(held: Held, outcome: HeldOutcome, kind: HeldErrorKind, message: string): void {
    this.leave(held);
    this.refusals.answer(held, outcome, kind, message);
  }
}
