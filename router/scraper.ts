// Reads each engine's load from its Prometheus page about once a second (vLLM and SGLang metric
// names) for the balancer, and doubles as the probe that brings an ejected endpoint back.
// Router side.
import { classifyUpstreamError } from './upstream.js';
import type { Endpoint, EngineLoad } from './endpoint.js';

type Field = keyof EngineLoad;

// Summed across label sets (data-parallel engines report one series per engine), except usage,
// where the fullest engine is what matters.
const WANTED: ReadonlyArray<readonly [string, Field]> = [
  ['vllm:num_requests_running', 'running'],
  ['vllm:num_requests_waiting', 'waiting'],
  ['vllm:kv_cache_usage_perc', 'kvUsage'],
  ['vllm:gpu_cache_usage_perc', 'kvUsage'],
  ['sglang:num_running_reqs', 'running'],
  ['sglang:num_queue_reqs', 'waiting'],
  ['sglang:token_usage', 'kvUsage'],
  // Counters: a change says the engine served something, whichever router sent it, so every
  // router agrees on when a deployment went idle.
  ['vllm:request_success_total', 'requests'],
  ['sglang:num_requests_total', 'requests'],
  // What a prefill and a request cost there (load before locality, affinity.ts): the phase
  // histograms' sums and counts, and the prompt tokens that were not found in the cache.
  ['vllm:request_prefill_time_seconds_sum', 'prefillSeconds'],
  ['vllm:request_inference_time_seconds_sum', 'inferenceSeconds'],
  ['vllm:request_inference_time_seconds_count', 'inferenceCount'],
  ['vllm:prompt_tokens_total', 'promptTokens'],
  ['vllm:prefix_cache_hits_total', 'cachedTokens'],
];

type Counter = 'requests' | 'prefillSeconds' | 'inferenceSeconds' | 'inferenceCount' | 'promptTokens' | 'cachedTokens';

/**
 * The load in a Prometheus text page, or undefined when it has none of the names we know.
 * Searches for the few names instead of parsing every line: a vLLM page is tens of kilobytes
 * of histograms, and at hundreds of endpoints a full parse each second would add up.
 */
export function parseEngineLoad(text: string): EngineLoad | undefined {
  const load: EngineLoad = { running: 0, waiting: 0, kvUsage: 0 };
  let found = false;
  for (const [name, field] of WANTED) {
    let from = 0;
    for (;;) {
      const at = text.indexOf(name, from);
      if (at < 0) break;
      from = at + name.length;
      // A sample line starts with the name and continues with labels or a space; `_total`,
      // `_bucket` or a name that merely begins with ours are other series.
      if (at > 0 && text.charCodeAt(at - 1) !== 10) continue;
      const next = text.charCodeAt(from);
      if (next !== 123 /* { */ && next !== 32 /* space */) continue;
      let end = text.indexOf('\n', from);
      if (end < 0) end = text.length;
      const line = text.slice(from, end).trimEnd();
      // The value is the last field but one when a timestamp follows; labels may hold spaces,
      // so look past the closing brace.
      const afterLabels = next === 123 ? line.indexOf('}') + 1 : 0;
      const fields = line.slice(afterLabels).trim().split(/\s+/);
      const value = Number(fields[0]);
      if (!Number.isFinite(value)) continue;
      found = true;
      if (field === 'kvUsage') load.kvUsage = Math.max(load.kvUsage, value);
      else if (field === 'running' || field === 'waiting') load[field] += value;
      else load[field as Counter] = (load[field as Counter] ?? 0) + value;
    }
  }
  return found ? load : undefined;
}

export interface ScraperOptions {
  intervalMs: number;
  timeoutMs: number;
}

export const DEFAULT_SCRAPER: ScraperOptions = { intervalMs: 1000, timeoutMs: 800 };

/** Scrapes every live endpoint each interval; a slow engine never delays the others. */
export class Scraper {
  private timer: NodeJS.Timeout | undefined;
  private readonly busy = new WeakSet<Endpoint>();

  constructor(
    private readonly endpoints: () => Iterable<Endpoint>,
    private readonly options: ScraperOptions,
    private readonly onConnectFailure: (endpoint: Endpoint) => void,
    /** After each engine's load was read (flow control may let a request through). */
    private readonly onScraped?: () => void,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.scrapeAll(), this.options.intervalMs);
    this.timer.unref();
    this.scrapeAll();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  scrapeAll(): void {
    for (const endpoint of this.endpoints()) {
      if (this.busy.has(endpoint)) continue;
      this.busy.add(endpoint);
      void this.scrape(endpoint).finally(() => this.busy.delete(endpoint));
    }
  }

  private async scrape(endpoint: Endpoint): Promise<void> {
    try {
      const { statusCode, body } = await endpoint.pool.request({
        method: 'GET',
        path: '/metrics',
        headersTimeout: this.options.timeoutMs,
        bodyTimeout: this.options.timeoutMs,
      });
      // Any answer proves the engine is there; only a 200 carries load (SGLang serves /metrics
      // only with --enable-metrics).
      let load: EngineLoad | undefined;
      if (statusCode === 200) load = parseEngineLoad(await body.text());
      else await body.dump();
      endpoint.probeSucceeded(performance.now(), load);
      if (load !== undefined) this.onScraped?.();
    } catch (err) {
      endpoint.probeFailed();
      // Only "nobody is listening" counts towards ejection: a slow metrics page says little
      // about whether inference works.
      if (classifyUpstreamError(err) === 'connect_refused') this.onConnectFailure(endpoint);
    }
  }
}
