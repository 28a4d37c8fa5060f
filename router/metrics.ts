// The router's Prometheus metrics (prom-client, one registry per router so that several routers
// in one process do not collide): requests by model and status, latency and time to first
// token, in-flight per replica, upstream errors, retries and ejections. Router side.
import { type Counter, type Gauge, type Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { Series } from './series.js';
import type { AffinityResult } from './policies/policy.js';

/** What the in-flight gauge reads at scrape time, so the hot path only bumps a number. */
export interface InflightView {
  url: string;
  inflight: number;
  ejected: boolean;
}

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900];
const TTFT_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export class RouterMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'model' | 'status'>;
  private readonly latency: Histogram<'model'>;
  private readonly ttft: Histogram<'model'>;
  private readonly upstreamErrors: Counter<'endpoint' | 'reason'>;
  private readonly retries: Counter<'reason'>;
  private readonly ejections: Counter<'endpoint'>;
  private readonly affinityPicks: Counter<'model' | 'result'>;
  readonly routeSourceUp: Gauge;
  private readonly keyRequests: Counter<'key'>;
  private readonly keyLimited: Counter<'key' | 'limit'>;
  private readonly keyOutOfScope: Counter<'key'>;
  private readonly keyTokens: Counter<'key' | 'kind'>;
  private readonly busy: Counter;
  /** Requests held while a sleeping replica wakes, and the wakes this router asked for (docs/sleep.md). */
  readonly wakes: WakeMetrics;

  constructor(endpoints: () => Iterable<InflightView>, options: { processMetrics?: boolean } = {}) {
    const series = new Series(this.registry);
    this.requests = series.counter(
      'llmgw_router_requests_total',
      'Requests answered, by model and HTTP status (a stream cut by its engine counts as 502).',
      ['model', 'status'],
    );
    this.latency = series.histogram(
      'llmgw_router_request_duration_seconds',
      'Time from the whole request having reached the router to the last byte of its answer.',
      ['model'],
      LATENCY_BUCKETS,
    );
    this.ttft = series.histogram(
      'llmgw_router_time_to_first_token_seconds',
      "Streaming requests: time from the whole request having reached the router to the engine's first body bytes.",
      ['model'],
      TTFT_BUCKETS,
    );
    this.upstreamErrors = series.counter('llmgw_router_upstream_errors_total', 'Failures talking to an engine, by endpoint and reason.', [
      'endpoint',
      'reason',
    ]);
    this.retries = series.counter(
      'llmgw_router_retries_total',
      'Requests sent again to another replica before their first byte, by the reason of the failure.',
      ['reason'],
    );
    this.ejections = series.counter('llmgw_router_ejections_total', 'Times an endpoint was taken out of rotation for failing.', [
      'endpoint',
    ]);
    this.affinityPicks = series.counter(
      'llmgw_router_affinity_total',
      "Cache-aware placements by model: on the key's home replica, diverted from an overloaded home to the least-loaded one, or a new key.",
      ['model', 'result'],
    );
    series.gauge('llmgw_router_inflight_requests', 'Requests this router has in flight, by replica endpoint.', ['endpoint'], {
      collect() {
        this.reset();
        for (const e of endpoints()) this.set({ endpoint: e.url }, e.inflight);
      },
    });
    series.gauge('llmgw_router_endpoint_ejected', '1 while an endpoint is out of rotation for failing.', ['endpoint'], {
      // With several router processes: out of rotation in any of them.
      aggregator: 'max',
      collect() {
        this.reset();
        for (const e of endpoints()) this.set({ endpoint: e.url }, e.ejected ? 1 : 0);
      },
    });
    this.routeSourceUp = series.gauge(
      'llmgw_router_route_source_up',
      '1 while the route source (Temporal) answers; 0 while the router serves its last table.',
      [],
      { aggregator: 'min' },
    );
    // Per API key, labelled by a prefix of the key's digest (never the key).
    this.keyRequests = series.counter('llmgw_router_key_requests_total', 'Inference requests admitted, by API key (sha256 prefix).', [
      'key',
    ]);
    this.keyLimited = series.counter(
      'llmgw_router_key_rate_limited_total',
      'Inference requests refused with 429, by API key (sha256 prefix) and the limit that refused them (rps, concurrent).',
      ['key', 'limit'],
    );
    this.keyOutOfScope = series.counter(
      'llmgw_router_key_out_of_scope_total',
      'Requests refused with 404 because they named a model or adapter outside their API key’s scope, by API key (sha256 prefix).',
      ['key'],
    );
    this.keyTokens = series.counter(
      'llmgw_router_key_tokens_total',
      "Tokens the engines reported in answers' usage, by API key (sha256 prefix) and kind (prompt, completion).",
      ['key', 'kind'],
    );
    this.busy = series.counter(
      'llmgw_router_held_bytes_refused_total',
      'Requests refused with 503 because their body would pass the budget for request bodies in memory (--held-bytes).',
    );
    this.wakes = new WakeMetrics(series);
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'llmgw_router_' });
  }

  forModel(model: string): ModelMetrics {
    const affinity = {
      home: this.affinityPicks.labels(model, 'home'),
      diverted: this.affinityPicks.labels(model, 'diverted'),
      new: this.affinityPicks.labels(model, 'new'),
    };
    return new ModelMetrics(this.requests, this.latency.labels(model), this.ttft.labels(model), model, affinity);
  }

  forKey(label: string): KeyMetrics {
    const limited = { rps: this.keyLimited.labels(label, 'rps'), concurrent: this.keyLimited.labels(label, 'concurrent') };
    return {
      requests: this.keyRequests.labels(label),
      limited: (limit) => limited[limit].inc(),
      outOfScope: this.keyOutOfScope.labels(label),
      promptTokens: this.keyTokens.labels(label, 'prompt'),
      completionTokens: this.keyTokens.labels(label, 'completion'),
    };
  }

  /** llmgw_router_held_bytes: what `read` says the request bodies in memory weigh, at scrape time. */
  watchHeldBytes(read: () => number): void {
    const help = 'Bytes of request bodies this router holds in memory (being read, waiting for a replica, in flight to an engine).';
    new Series(this.registry).gauge('llmgw_router_held_bytes', help, [], {
      collect() {
        this.set(read());
      },
    });
  }

  overBudget(): void {
    this.busy.inc();
  }

  upstreamError(endpoint: string, reason: string): void {
    this.upstreamErrors.inc({ endpoint, reason });
  }

  retry(reason: string): void {
    this.retries.inc({ reason });
  }

  ejected(endpoint: string): void {
    this.ejections.inc({ endpoint });
  }
}

/** Wake seconds: about one for vLLM's level 1, a few for level 2 or a GPU that must first put another engine to sleep. */
const WAKE_HELD_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 30, 60, 120, 300];

/** The router's side of sleep and wake: what it held, what it asked, how long its clients waited. */
export class WakeMetrics {
  private readonly held: Counter<'model'>;
  private readonly asked: Counter<'deployment' | 'result'>;
  private readonly heldSeconds: Histogram<'model' | 'outcome'>;

  constructor(series: Series) {
    this.held = series.counter('llmgw_router_wake_held_total', 'Requests held because every replica of their model was asleep, by model.', [
      'model',
    ]);
    this.asked = series.counter(
      'llmgw_router_wakes_total',
      'wakeReplica Updates this router sent, by deployment and result (woken; awake: it was already; failed).',
      ['deployment', 'result'],
    );
    this.heldSeconds = series.histogram(
      'llmgw_router_wake_held_seconds',
      'Time requests spent held for a sleeping replica to wake, by model and how the wait ended (sent, timeout, gone, removed, stopping).',
      ['model', 'outcome'],
      WAKE_HELD_BUCKETS,
    );
  }

  heldFor(model: string): void {
    this.held.inc({ model });
  }

  wakeAsked(deployment: string, result: 'woken' | 'awake' | 'failed'): void {
    this.asked.inc({ deployment, result });
  }

  waited(model: string, outcome: string, seconds: number): void {
    this.heldSeconds.observe({ model, outcome }, seconds);
  }
}

type CounterChild = ReturnType<Counter<'model' | 'status'>['labels']>;

/** One API key's counters, looked up once. */
export interface KeyMetrics {
  requests: { inc(value?: number): void };
  limited(limit: 'rps' | 'concurrent'): void;
  outOfScope: { inc(value?: number): void };
  promptTokens: { inc(value?: number): void };
  completionTokens: { inc(value?: number): void };
}
type HistogramChild = ReturnType<Histogram<'model'>['labels']>;

/** One model's children, looked up once, so recording a request hashes no label set. */
export class ModelMetrics {
  private readonly byStatus = new Map<number, CounterChild>();

  constructor(
    private readonly requests: Counter<'model' | 'status'>,
    private readonly latency: HistogramChild,
    private readonly ttft: HistogramChild,
    private readonly model: string,
    private readonly affinityPicks: Record<AffinityResult, { inc(): void }>,
  ) {}

  affinity(result: AffinityResult): void {
    this.affinityPicks[result].inc();
  }

  record(status: number, seconds: number, ttftSeconds: number | undefined): void {
    let child = this.byStatus.get(status);
    if (child === undefined) {
      child = this.requests.labels(this.model, String(status));
      this.byStatus.set(status, child);
    }
    child.inc();
    this.latency.observe(seconds);
    if (ttftSeconds !== undefined) this.ttft.observe(ttftSeconds);
  }

  /** A request refused before it reached a replica: counted, not timed. */
  refused(status: number): void {
    let child = this.byStatus.get(status);
    if (child === undefined) {
      child = this.requests.labels(this.model, String(status));
      this.byStatus.set(status, child);
    }
    child.inc();
  }
}

/**
 * llmgw_router_temporal_requests_total{method} in `registry`: every call the router makes to
 * Temporal, counted where it is made (the primary of a cluster), so that what a router costs
 * Temporal can be read off /metrics. Returns what to call per request.
 */
export function temporalCallCounter(registry: Registry): (method: string) => void {
  const counter = new Series(registry).counter(
    'llmgw_router_temporal_requests_total',
    'Calls this router made to Temporal (its route source), by gRPC method.',
    ['method'],
  );
  return (method) => counter.inc({ method });
}
