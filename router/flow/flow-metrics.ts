// The router's flow-control series: what its waiting lines hold, how long requests waited and
// what they were refused, by model and, where flow control decides, by tenant and priority; the
// deadlines asked and how they went; and how far the time-to-first-token prediction is from what
// happened, so that an operator can see how far to trust a refusal. Router side.
import type { Counter, Histogram, Registry } from 'prom-client';
import { Series } from '../series.js';
import type { ModelQueue } from './queue.js';
import { priorityLabel, type FlowClass } from './priority.js';

const WAIT_BUCKETS = [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600];
const ERROR_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export type DeadlineOutcome = 'met' | 'missed' | 'refused';

export class FlowMetrics {
  readonly wait: Histogram<'model' | 'outcome'>;
  readonly held: Counter<'model' | 'reason'>;
  readonly refusedCount: Counter<'model' | 'reason'>;
  private readonly classWait: Histogram<'model' | 'tenant' | 'priority'>;
  private readonly classRefused: Counter<'model' | 'tenant' | 'priority' | 'reason'>;
  private readonly deadlines: Counter<'model' | 'tenant' | 'priority' | 'outcome'>;
  private readonly predictionError: Histogram<'model' | 'direction'>;
  private readonly errorChildren = new Map<
    string,
    { late: Histogram.Internal<'model' | 'direction'>; early: Histogram.Internal<'model' | 'direction'> }
  >();

  constructor(registry: Registry, queues: ReadonlyMap<string, ModelQueue>) {
    const series = new Series(registry);
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
    series.gauge('llmgw_router_flow_held', 'Requests the router holds, by model, tenant and priority.', ['model', 'tenant', 'priority'], {
      collect() {
        this.reset();
        for (const [model, q] of queues)
          for (const c of q.classes()) this.set({ model, tenant: c.tenant, priority: priorityLabel(c.priority) }, c.held);
      },
    });
    this.wait = series.histogram(
      'llmgw_router_queue_wait_seconds',
      'Time requests spent held at the router, by model and how the wait ended (sent; timeout; gone: the client left; removed: the model was; stopping: the router; shed: made room for a higher priority or a tenant holding less of the line; deadline: its deadline passed).',
      ['model', 'outcome'],
      WAIT_BUCKETS,
    );
    this.classWait = series.histogram(
      'llmgw_router_flow_wait_seconds',
      'Time requests spent held at the router before they were sent, by model, tenant and priority.',
      ['model', 'tenant', 'priority'],
      WAIT_BUCKETS,
    );
    this.held = series.counter(
      'llmgw_router_queued_total',
      'Requests the router held, by model and reason (no_replica: at zero or starting; sleeping: being woken; saturated: flow control).',
      ['model', 'reason'],
    );
    this.refusedCount = series.counter(
      'llmgw_router_queue_refused_total',
      'Requests the waiting line answered with an error, by model and reason (full, shed, deadline: 429; timeout, removed, stopping: 503 or 404).',
      ['model', 'reason'],
    );
    this.classRefused = series.counter(
      'llmgw_router_flow_refused_total',
      'Requests flow control refused, by model, tenant, priority and reason (full: the line was; shed: dropped from the line for a higher priority or a tenant holding less of it; deadline: predicted to miss it; timeout: held too long).',
      ['model', 'tenant', 'priority', 'reason'],
    );
    this.deadlines = series.counter(
      'llmgw_router_deadlines_total',
      'Requests that asked a deadline (x-llmgw-slo-ttft-ms), by model, tenant, priority and outcome (met; missed: first token late or held past it; refused: predicted to miss it, answered 429 at once).',
      ['model', 'tenant', 'priority', 'outcome'],
    );
    this.predictionError = series.histogram(
      'llmgw_router_ttft_prediction_error_seconds',
      'How far the first token of a streamed request came from the time flow control predicted when it sent it, by model and direction (late: after the prediction; early: before).',
      ['model', 'direction'],
      ERROR_BUCKETS,
    );
  }

  waited(model: string, flow: FlowClass, seconds: number): void {
    this.classWait.observe({ model, tenant: flow.tenant, priority: priorityLabel(flow.priority) }, seconds);
  }

  refused(model: string, flow: FlowClass, reason: string): void {
    this.classRefused.inc({ model, tenant: flow.tenant, priority: priorityLabel(flow.priority), reason });
  }

  deadline(model: string, flow: FlowClass, outcome: DeadlineOutcome): void {
    this.deadlines.inc({ model, tenant: flow.tenant, priority: priorityLabel(flow.priority), outcome });
  }

  /** Observed for every streamed request: its children are kept per model, not looked up by labels each time. */
  predicted(model: string, predictedMs: number, actualMs: number): void {
    let children = this.errorChildren.get(model);
    if (children === undefined) {
      children = { late: this.predictionError.labels(model, 'late'), early: this.predictionError.labels(model, 'early') };
      this.errorChildren.set(model, children);
    }
    const error = actualMs - predictedMs;
    (error >= 0 ? children.late : children.early).observe(Math.abs(error) / 1000);
  }
}
