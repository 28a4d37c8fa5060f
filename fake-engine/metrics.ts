// The fake engine's load accounting and its Prometheus page, under vLLM's metric names so a
// router or dashboard that reads vLLM reads the fake engine unchanged. Engine side.
// Written by hand: a handful of numbers do not need prom-client's registry on the hot path.
import type { PrefixCache } from './prefix-cache.js';

export class EngineMetrics {
  running = 0;
  waiting = 0;
  requestSuccess = 0;
  promptTokens = 0;
  generationTokens = 0;
  /** Sums over finished requests of the prefill phase and of the whole run (slot to end), seconds. */
  prefillSeconds = 0;
  inferenceSeconds = 0;
  decodeSeconds = 0;
  /** Completions finished (embeddings have no phases). */
  completions = 0;
  private readonly label: string;

  constructor(
    servedModelName: string,
    private readonly maxConcurrency: number,
    /** Present when the engine models a prefix cache: its counters are on the page. */
    private readonly cache?: PrefixCache,
  ) {
    this.label = `{model_name=${JSON.stringify(servedModelName)}}`;
  }

  render(): string {
    const l = this.label;
    const usage = this.running / this.maxConcurrency;
    return (
      metric('gauge', 'vllm:num_requests_running', 'Number of requests currently running.', l, this.running) +
      metric('gauge', 'vllm:num_requests_waiting', 'Number of requests waiting to be processed.', l, this.waiting) +
      metric('gauge', 'vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', l, usage) +
      metric('gauge', 'vllm:gpu_cache_usage_perc', 'GPU KV-cache usage. 1 means 100 percent usage.', l, usage) +
      metric('counter', 'vllm:request_success_total', 'Count of successfully processed requests.', l, this.requestSuccess) +
      metric('counter', 'vllm:prompt_tokens_total', 'Number of prefill tokens processed.', l, this.promptTokens) +
      metric('counter', 'vllm:generation_tokens_total', 'Number of generation tokens processed.', l, this.generationTokens) +
      histogram(
        'vllm:request_prefill_time_seconds',
        'Histogram of time spent in PREFILL phase for request.',
        l,
        this.prefillSeconds,
        this.completions,
      ) +
      histogram(
        'vllm:request_decode_time_seconds',
        'Histogram of time spent in DECODE phase for request.',
        l,
        this.decodeSeconds,
        this.completions,
      ) +
      histogram(
        'vllm:request_inference_time_seconds',
        'Histogram of time spent in RUNNING phase for request.',
        l,
        this.inferenceSeconds,
        this.completions,
      ) +
      (this.cache === undefined
        ? ''
        : metric(
            'counter',
            'vllm:prefix_cache_queries_total',
            'Prefix cache queries, in terms of number of queried tokens.',
            l,
            this.cache.queries,
          ) +
          metric('counter', 'vllm:prefix_cache_hits_total', 'Prefix cache hits, in terms of number of cached tokens.', l, this.cache.hits))
    );
  }
}

/** One gauge or counter with its HELP and TYPE lines, as Prometheus' text format writes it. */
function metric(type: 'gauge' | 'counter', name: string, help: string, labels: string, value: number): string {
  return `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}${labels} ${value}\n`;
}

/** A histogram with only its +Inf bucket: what a reader of means (sum / count) needs, under vLLM's name. */
function histogram(name: string, help: string, labels: string, sum: number, count: number): string {
  const bucketLabels = `${labels.slice(0, -1)},le="+Inf"}`;
  return (
    `# HELP ${name} ${help}\n# TYPE ${name} histogram\n` +
    `${name}_bucket${bucketLabels} ${count}\n${name}_sum${labels} ${sum}\n${name}_count${labels} ${count}\n`
  );
}

/**
 * At most `limit` requests run at once; the rest wait in arrival order, as in vLLM's
 * scheduler. Acquiring a free slot is synchronous so the common case allocates nothing.
 */
export class Slots {
  private readonly queue: Array<() => void> = [];

  constructor(
    private readonly limit: number,
    private readonly metrics: EngineMetrics,
  ) {}

  tryAcquire(): boolean {
    if (this.metrics.running >= this.limit || this.queue.length > 0) return false;
    this.metrics.running++;
    return true;
  }

  /** Calls `start` once a slot is this waiter's; the returned function gives up waiting. */
  wait(start: () => void): () => void {
    this.queue.push(start);
    this.metrics.waiting++;
    return () => {
      const i = this.queue.indexOf(start);
      if (i >= 0) {
        this.queue.splice(i, 1);
        this.metrics.waiting--;
      }
    };
  }

  release(): void {
    const next = this.queue.shift();
    if (next === undefined) {
      this.metrics.running--;
      return;
    }
    // The slot passes straight to the next waiter: running stays the same.
    this.metrics.waiting--;
    next();
  }
}
