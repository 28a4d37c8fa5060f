// Where the router holds requests instead of refusing them or piling them onto engines: for an
// autoscaled deployment with no routable replica (at zero, or starting: the first request wakes
// it), for a model whose replicas all sleep (engines/wake.ts wakes one), and for any deployment whose every replica is saturated (flow control). Bounded in count
// and wait per deployment; over either limit a clean 429 or 503 with Retry-After. Requests leave
// as soon as a replica can take them: a new route table, a finished request, a scrape. Router side.
import type { Counter, Histogram, Registry } from 'prom-client';
import { Series } from '../series.js';
import { sendError } from '../http/errors.js';
import type { Endpoint } from './endpoint.js';
import type { ModelPool } from './model-pool.js';
import { Exchange, type ProxySettings } from './exchange.js';
import { ModelQueue, type Held, type HoldReason } from './queue.js';
import type { ExchangeResponse, RoutedRequest } from './routed-request.js';
import type { WakeMetrics } from '../metrics.js';

export interface QueueSettings {
  /** Requests one router process holds per deployment (served name). */
  maxPerModel: number;
  /** How long a request may wait before it is answered 503. */
  maxWaitMs: number;
  /** An engine with this many requests waiting takes no more; undefined turns flow control off. */
  saturatedWaiting: number | undefined;
}

export const DEFAULT_QUEUE: QueueSettings = { maxPerModel: 1000, maxWaitMs: 300_000, saturatedWaiting: 8 };

/** A cold start takes seconds to minutes; a saturated replica frees a slot within a generation. */
const RETRY_AFTER_S: Record<HoldReason, number> = { no_replica: 5, sleeping: 5, saturated: 1 };
const WAIT_BUCKETS = [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600];
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

export class WaitingRoom {
  private readonly queues = new Map<string, ModelQueue>();
  private readonly notifiedAt = new Map<string, number>();
  private total = 0;
  private readonly wait: Histogram<'model' | 'outcome'>;
  private readonly held: Counter<'model' | 'reason'>;
  private readonly refusedCount: Counter<'model' | 'reason'>;

  constructor(
    readonly settings: QueueSettings,
    private readonly hooks: WaitingRoomHooks,
    registry: Registry,
  ) {
    const series = new Series(registry);
    const queues = this.queues;
    series.gauge(
      'llmgw_router_queue_depth',
      'Requests the router holds, by model: waiting for a replica (scale from zero) or for a saturated one.',
      ['model'],
      {
        collect() {
          this.reset();
          for (const [model, q] of queues) this.set({ model }, q.size);
        },
      },
    );
    this.wait = series.histogram(
      'llmgw_router_queue_wait_seconds',
      'Time requests spent held at the router, by model and how the wait ended (sent; timeout; gone: the client left; removed: the model was; stopping: the router).',
      ['model', 'outcome'],
      WAIT_BUCKETS,
    );
    this.held = series.counter(
      'llmgw_router_queued_total',
      'Requests the router held, by model and reason (no_replica: at zero or starting; sleeping: being woken; saturated: flow control).',
      ['model', 'reason'],
    );
    this.refusedCount = series.counter(
      'llmgw_router_queue_refused_total',
      'Requests the waiting line answered with an error, by model and reason (full: 429; timeout, removed, stopping: 503 or 404).',
      ['model', 'reason'],
    );
  }

  queueFor(model: string): ModelQueue {
    let q = this.queues.get(model);
    if (q === undefined) {
      q = new ModelQueue(model);
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

  /** True when a request for this pool must wait: others already do (no jumping the line), or every replica is saturated. */
  mustQueue(pool: ModelPool): boolean {
    if (pool.queue.size > 0) return true;
    const threshold = this.settings.saturatedWaiting;
    if (threshold === undefined) return false;
    const endpoints = pool.endpoints;
    for (let i = 0; i < endpoints.length; i++) if (!(endpoints[i] as Endpoint).saturated(threshold)) return false;
    return true;
  }

  /** Holds a request (`noReplica`: for a replica to exist; else for a saturated one to take it), or refuses it when the line is full. */
  hold(pool: ModelPool, res: ExchangeResponse, request: RoutedRequest, noReplica: boolean): void {
    const q = pool.queue;
    const model = pool.servedName;
    const reason: HoldReason = noReplica ? (pool.sleepers.length > 0 ? 'sleeping' : 'no_replica') : 'saturated';
    const held: Held = {
      model,
      res,
      request,
      heldAt: performance.now(),
      key: res.gate?.key.index ?? -1,
      reason,
      timer: undefined,
      line: undefined,
    };
    if (q.size >= this.settings.maxPerModel) {
      this.refuse(held);
      return;
    }
    q.push(held);
    this.total++;
    this.held.inc({ model, reason: held.reason });
    held.timer = setTimeout(() => this.expire(held), this.settings.maxWaitMs);
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
    const threshold = this.settings.saturatedWaiting;
    const now = performance.now();
    while (q.size > 0) {
      if (threshold !== undefined && pool.endpoints.every((e) => e.saturated(threshold))) return;
      const held = q.shift() as Held;
      this.leave(held);
      const queuedMs = now - held.heldAt;
      this.observe(held, 'sent', queuedMs);
      const exchange = new Exchange(this.hooks.proxy(), held.res, pool, held.request);
      exchange.queuedMs = queuedMs;
      exchange.start();
    }
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

  private expire(held: Held): void {
    if (held.line === undefined || !held.line.remove(held)) return;
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
    this.wait.observe({ model: held.model, outcome }, waitedMs / 1000);
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
    this.refusedCount.inc({ model: held.model, reason: outcome });
    sendError(held.res, kind, message, false, RETRY_AFTER_S[held.reason]);
  }

  private refuse(held: Held): void {
    this.refusedCount.inc({ model: held.model, reason: 'full' });
    const message = `Too many requests are waiting for model \`${held.model}\`; please try again shortly.`;
    sendError(held.res, 'queue_full', message, false, RETRY_AFTER_S[held.reason]);
  }
}
