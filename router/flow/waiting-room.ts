// Where the router holds requests instead of refusing them or piling them onto engines: for an
// autoscaled deployment with no routable replica (at zero, or starting: the first request wakes
// it), for a model whose replicas all sleep (engines/wake.ts wakes one), and for any deployment
// whose every replica is saturated (flow control). Requests leave by priority, then fairly across
// tenants (flow/queue.ts), as a replica has room (flow/room.ts); one that asks a deadline it is
// predicted to miss is refused at once (flow/deadline.ts). Bounded in count and wait per
// deployment; over either limit a clean 429 or 503 with Retry-After, the lowest priority first.
// Router side.
import type { Registry } from 'prom-client';
import { sendError } from '../http/errors.js';
import type { Endpoint } from '../engines/endpoint.js';
import type { ModelPool } from '../engines/model-pool.js';
import { Exchange, type FlowRecorder, type ProxySettings } from '../engines/exchange.js';
import { ModelQueue, type Fairness, type Held, type HeldClass, type HoldReason } from './queue.js';
import type { ExchangeResponse, RoutedRequest } from '../engines/routed-request.js';
import type { WakeMetrics } from '../metrics.js';
import { FlowMetrics } from './flow-metrics.js';
import { contentionOf, DEFAULT_KEPT_SHARE, hasRoom, isPrivileged, lineWaitMs, type Contention } from './room.js';
import { meeting, predictTtftMs, TTFT_HEADER } from './deadline.js';
import { priorityLabel } from './priority.js';

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

/** A cold start takes seconds to minutes; a saturated replica frees a slot within a generation. */
const RETRY_AFTER_S: Record<HoldReason, number> = { no_replica: 5, sleeping: 5, saturated: 1 };
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
}

/** What the admin /health shows of one model's line: what is held by tenant and priority, and their requests in flight. */
export interface LineView {
  held: number;
  classes: Array<{ tenant: string; priority: string; held: number; inflight: number }>;
}

export class WaitingRoom implements FlowRecorder {
  private readonly queues = new Map<string, ModelQueue>();
  private readonly notifiedAt = new Map<string, number>();
  private total = 0;
  readonly metrics: FlowMetrics;

  constructor(
    readonly settings: QueueSettings,
    private readonly hooks: WaitingRoomHooks,
    registry: Registry,
  ) {
    this.metrics = new FlowMetrics(registry, this.queues);
  }

  queueFor(model: string): ModelQueue {
    let q = this.queues.get(model);
    if (q === undefined) {
      q = new ModelQueue(model, this.settings.fairness);
      this.queues.set(model, q);
    }
    return q;
  }

  /** Requests held in this process, by model. */
  depths(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [model, q] of this.queues) if (q.size > 0) out[model] = q.size;
    return out;
  }

  /** Held requests of sheddable priority, by model (the autoscaler may leave them out). */
  sheddableDepths(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [model, q] of this.queues) {
      const n = q.classes().reduce((sum, c: HeldClass) => sum + (c.priority < 0 ? c.held : 0), 0);
      if (n > 0) out[model] = n;
    }
    return out;
  }

  /** The lines as the admin /health shows them. */
  lines(): Record<string, LineView> {
    const out: Record<string, LineView> = {};
    for (const [model, q] of this.queues) {
      if (q.size === 0) continue;
      const classes = q.classes().map((c) => ({
        tenant: c.tenant,
        priority: priorityLabel(c.priority),
        held: c.held,
        inflight: q.shares.inflightOf(c.tenant),
      }));
      out[model] = { held: q.size, classes };
    }
    return out;
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
    const privileged = isPrivileged(q.shares, request.flow, contention);
    const room = (e: Endpoint) => hasRoom(e, this.settings, contention, privileged);
    // No jumping the line: with requests held, this one takes its place among them.
    const sendNow = q.size === 0 && (threshold === undefined || pool.endpoints.some(room));
    if (request.deadline !== undefined) {
      const lineMs = sendNow ? 0 : lineWaitMs(q, pool.endpoints, this.settings, request.flow, contention, privileged);
      const candidates = sendNow ? pool.endpoints.filter(room) : pool.endpoints;
      const verdict = meeting(request.deadline, candidates, request.body.length, lineMs);
      if (verdict.meets.length === 0) return this.refuseDeadline(pool, res, request, verdict.bestTtftMs, verdict.bestTpotMs);
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
    const held: Held = { model, res, request, heldAt: performance.now(), reason, timer: undefined, line: undefined, tag: 0 };
    if (q.size >= this.settings.maxPerModel) {
      // The lowest priority is refused first (a newcomer above it takes its place), then, at the
      // newcomer's own priority, the tenant holding the most of the line for its weight.
      const victim = q.victimFor(request.flow);
      if (victim === undefined) return this.refuse(held, 'full');
      q.remove(victim);
      this.leave(victim);
      this.refuse(victim, victim.request.flow.priority < request.flow.priority ? 'shed' : 'shed_share');
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
      const held = this.next(pool, q, contention);
      if (held === undefined) return;
      this.leave(held);
      const queuedMs = now - held.heldAt;
      this.observe(held, 'sent', queuedMs);
      this.metrics.waited(model, held.request.flow, queuedMs / 1000);
      const exchange = new Exchange(this.hooks.proxy(), held.res, pool, held.request);
      exchange.queuedMs = queuedMs;
      exchange.start();
    }
  }

  /**
   * The next request a replica has room for: the line's next when an engine has an open slot;
   * when only kept slots are free, the next of those allowed them (critical, or below its
   * tenant's share); undefined when nothing can go.
   */
  private next(pool: ModelPool, q: ModelQueue, contention: Contention): Held | undefined {
    const settings = this.settings;
    if (settings.saturatedWaiting === undefined) return q.shift();
    const open = pool.endpoints.some((e) => hasRoom(e, settings, contention, false));
    if (!contention.contended) return open ? q.shift() : undefined;
    let held: Held | undefined;
    if (open) held = q.shift();
    else if (pool.endpoints.some((e) => hasRoom(e, settings, contention, true)))
      held = q.shiftWhere((flow) => isPrivileged(q.shares, flow, contention));
    if (held === undefined) return undefined;
    const privileged = isPrivileged(q.shares, held.request.flow, contention);
    held.request.eligible = (e) => hasRoom(e, settings, contention, privileged);
    return held;
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
    if (ttft !== undefined) this.metrics.deadline(model, request.flow, actualMs <= ttft ? 'met' : 'missed');
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
    if (ttft !== undefined && waitedMs < this.settings.maxWaitMs) {
      this.leave(held);
      this.observe(held, 'deadline', waitedMs);
      this.metrics.deadline(held.model, held.request.flow, 'missed');
      this.metrics.refused(held.model, held.request.flow, 'deadline');
      this.metrics.refusedCount.inc({ model: held.model, reason: 'deadline' });
      const message = `The request's deadline for a first token (${ttft} ms, ${TTFT_HEADER}) passed while it waited for a replica of model \`${held.model}\`; it was not sent.`;
      return sendError(held.res, 'deadline_missed', message, false, RETRY_AFTER_S[held.reason]);
    }
    const waited = Math.round(this.settings.maxWaitMs / 1000);
    this.answer(
      held,
      'timeout',
      'queue_timeout',
      `The request waited ${waited} s for a replica of model \`${held.model}\` and was not sent.`,
    );
  }

  private gone(held: Held): void {
    if (held.line === undefined || !held.line.remove(held)) return;
    this.leave(held);
    this.observe(held, 'gone', performance.now() - held.heldAt);
  }

  private observe(held: Held, outcome: string, waitedMs: number): void {
    this.metrics.wait.observe({ model: held.model, outcome }, waitedMs / 1000);
    if (held.reason === 'sleeping') this.hooks.wakeMetrics?.waited(held.model, outcome, waitedMs / 1000);
  }

  /** Answers a request already taken off its line with an error. */
  private answer(
    held: Held,
    outcome: 'timeout' | 'removed' | 'stopping',
    kind: 'queue_timeout' | 'unknown_model' | 'no_replica' | 'router_stopping',
    message: string,
  ): void {
    this.leave(held);
    this.observe(held, outcome, performance.now() - held.heldAt);
    this.metrics.refusedCount.inc({ model: held.model, reason: outcome });
    if (outcome === 'timeout') this.metrics.refused(held.model, held.request.flow, 'timeout');
    sendError(held.res, kind, message, false, RETRY_AFTER_S[held.reason]);
  }

  /**
   * 429 for a request the line has no room for (`full`), or gives up (already taken off its line)
   * for a higher priority (`shed`) or for a tenant holding less of the line (`shed_share`).
   */
  private refuse(held: Held, why: 'full' | 'shed' | 'shed_share'): void {
    const reason = why === 'full' ? 'full' : 'shed';
    if (reason === 'shed') this.observe(held, 'shed', performance.now() - held.heldAt);
    this.metrics.refusedCount.inc({ model: held.model, reason });
    this.metrics.refused(held.model, held.request.flow, reason);
    const waiting = `Too many requests are waiting for model \`${held.model}\``;
    const message =
      why === 'full'
        ? `${waiting}; please try again shortly.`
        : why === 'shed'
          ? `${waiting} and this one's priority (${priorityLabel(held.request.flow.priority)}) is the lowest; please try again shortly.`
          : `${waiting} and this request's tenant holds the most of them for its weight; please try again shortly.`;
    sendError(held.res, 'queue_full', message, false, RETRY_AFTER_S[held.reason]);
  }

  /** 429 at once: no replica is predicted to give the first token (or the tokens after) in time. */
  private refuseDeadline(pool: ModelPool, res: ExchangeResponse, request: RoutedRequest, ttftMs: number, tpotMs: number | undefined): void {
    const model = pool.servedName;
    this.metrics.deadline(model, request.flow, 'refused');
    this.metrics.refused(model, request.flow, 'deadline');
    this.metrics.refusedCount.inc({ model, reason: 'deadline' });
    const { deadline } = request;
    const parts: string[] = [];
    if (deadline?.ttftMs !== undefined) parts.push(`first token in ${Math.round(ttftMs)} ms (asked ${deadline.ttftMs} ms)`);
    if (deadline?.tpotMs !== undefined && tpotMs !== undefined)
      parts.push(`${tpotMs.toFixed(1)} ms per token (asked ${deadline.tpotMs} ms)`);
    const message = `No replica of model \`${model}\` is predicted to meet this request's deadline: best predicted ${parts.join(', ')}. Try again later or with a longer deadline.`;
    sendError(res, 'deadline_unmeetable', message, false, Math.max(1, Math.ceil(ttftMs / 1000)));
  }
}
