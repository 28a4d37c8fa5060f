// Reads each engine's load from its Prometheus page about once a second (vLLM and SGLang metric
// names) for the balancer, and doubles as the probe that ejects an engine nobody can reach and
// brings an ejected endpoint back. Router side.
import { setTimeout as delay } from 'node:timers/promises';
import { classifyUpstreamError, type UpstreamFailure } from './upstream.js';
import { EJECT_AFTER_FAILURES, type Endpoint, type EngineLoad } from './endpoint.js';
import { reachable, REACH_TIMEOUT_MS } from './reachability.js';

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
  // llama.cpp: requests in a slot, and requests deferred because every slot is busy. It exports
  // no KV-cache usage; a full set of slots shows as deferred requests instead (docs/engines.md).
  ['llamacpp:requests_processing', 'running'],
  ['llamacpp:requests_deferred', 'waiting'],
  // Counters: a change says the engine served something, whichever router sent it, so every
  // router agrees on when a deployment went idle.
  ['vllm:request_success_total', 'requests'],
  ['sglang:num_requests_total', 'requests'],
  // What a prefill and a request cost there (load before locality, policies/affinity-table.ts): the phase
  // histograms' sums and counts, and the prompt tokens that were not found in the cache.
  ['vllm:request_prefill_time_seconds_sum', 'prefillSeconds'],
  ['vllm:request_inference_time_seconds_sum', 'inferenceSeconds'],
  ['vllm:request_inference_time_seconds_count', 'inferenceCount'],
  ['vllm:prompt_tokens_total', 'promptTokens'],
  ['vllm:prefix_cache_hits_total', 'cachedTokens'],
  // What a generated token costs (flow/deadline.ts predicts time per output token from it).
  ['vllm:request_decode_time_seconds_sum', 'decodeSeconds'],
  ['vllm:generation_tokens_total', 'generationTokens'],
  ['llamacpp:tokens_predicted_seconds_total', 'decodeSeconds'],
  ['llamacpp:tokens_predicted_total', 'generationTokens'],
  // llama.cpp counts no requests; a decode step is work served, which is all `requests` is read for.
  ['llamacpp:n_decode_total', 'requests'],
  ['llamacpp:prompt_seconds_total', 'prefillSeconds'],
  // llama.cpp's prompt_tokens_total leaves out the cached tokens (vLLM's counts every prompt
  // token), so the cached counter is added to both: series of one field are summed.
  ['llamacpp:prompt_tokens_total', 'promptTokens'],
  ['llamacpp:prompt_tokens_cached_total', 'promptTokens'],
  ['llamacpp:prompt_tokens_cached_total', 'cachedTokens'],
];

type Counter =
  | 'requests'
  | 'prefillSeconds'
  | 'inferenceSeconds'
  | 'inferenceCount'
  | 'promptTokens'
  | 'cachedTokens'
  | 'decodeSeconds'
  | 'generationTokens';

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

/**
 * An engine whose concurrency is not known yet, with work from this router on it, is read this
 * often instead: until a scrape has seen it full, cache-aware routing cannot weigh its queue
 * (policies/affinity-table.ts), and a hot prefix must not pile up on it for a whole interval.
 */
const LEARNING_MS = 200;
/** ... for this long after it first had work: an engine never seen full (a large max_num_seqs) is not read 5x a second for good. */
const LEARNING_FOR_MS = 10_000;
/** Past the scrape's timeout before a scrape still waiting is judged: undici's own timeout, when it runs, goes first. */
const OVERDUE_SLACK_MS = 50;

/** Scrapes every live endpoint each interval; a slow engine never delays the others. */
export class Scraper {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly busy = new WeakSet<Endpoint>();
  /** performance.now() of each endpoint's last scrape. */
  private readonly lastAt = new WeakMap<Endpoint, number>();
  /** performance.now() until which an endpoint may be read every LEARNING_MS (from when it first had work). */
  private readonly learnUntil = new WeakMap<Endpoint, number>();

  constructor(
    private readonly endpoints: () => Iterable<Endpoint>,
    private readonly options: ScraperOptions,
    private readonly onUnreachable: (endpoint: Endpoint) => void,
    /** After each engine's load was read (flow control may let a request through). */
    private readonly onScraped?: () => void,
  ) {}

  start(): void {
    const tick = Math.min(LEARNING_MS, this.options.intervalMs);
    this.timer = setInterval(() => this.scrapeDue(performance.now()), tick);
    this.timer.unref();
    this.scrapeAll();
  }

  /** Endpoints whose interval is over, and those still being learned that have work on them. */
  private scrapeDue(now: number): void {
    for (const endpoint of this.endpoints()) {
      const since = now - (this.lastAt.get(endpoint) ?? -Infinity);
      let learning = false;
      if (endpoint.inflight > 0 && !Number.isFinite(endpoint.concurrency())) {
        let until = this.learnUntil.get(endpoint);
        if (until === undefined) this.learnUntil.set(endpoint, (until = now + LEARNING_FOR_MS));
        learning = now < until;
      }
      if (since >= this.options.intervalMs - 1 || (learning && since >= LEARNING_MS - 1)) this.scrapeOne(endpoint);
    }
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
  }

  scrapeAll(): void {
    for (const endpoint of this.endpoints()) this.scrapeOne(endpoint);
  }

  private scrapeOne(endpoint: Endpoint): void {
    if (this.busy.has(endpoint)) return;
    this.busy.add(endpoint);
    this.lastAt.set(endpoint, performance.now());
    void this.scrape(endpoint).finally(() => this.busy.delete(endpoint));
  }

  /**
   * A scrape not answered within its timeout is judged then, even while it still waits: undici's
   * headers timeout starts only once the request is written, and a connection that cannot open
   * (a partition) would hold the scrape for the pool's whole connect timeout (3 s) first. The
   * endpoint stays busy until the scrape ends, so scrapes of it never pile up.
   */
  private async scrape(endpoint: Endpoint): Promise<void> {
    const reading = this.read(endpoint);
    let timer: NodeJS.Timeout | undefined;
    const overdue = new Promise<'overdue'>((resolve) => {
      timer = setTimeout(() => resolve('overdue'), this.options.timeoutMs + OVERDUE_SLACK_MS);
      timer.unref();
    });
    const outcome = await Promise.race([reading, overdue]);
    clearTimeout(timer);
    if (outcome === 'read') return;
    endpoint.probeFailed();
    await this.judgeFailure(endpoint, outcome);
    if (outcome === 'overdue') await reading;
  }

  /** One read of the engine's /metrics: 'read' when it answered, else how it failed. */
  private async read(endpoint: Endpoint): Promise<'read' | UpstreamFailure> {
    try {
      const { statusCode, body } = await endpoint.pool.request({
        method: 'GET',
        path: '/metrics',
        headers: endpoint.auth.own,
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
      return 'read';
    } catch (err) {
      return classifyUpstreamError(err);
    }
  }

  /**
   * Whether a failed scrape counts towards ejecting the endpoint. "Nobody is listening" does. A
   * scrape that timed out (or failed some other way) is either a metrics page slow under load,
   * which says little about whether inference works, or a partition (packets dropped, no reset),
   * where every request sent there hangs until its client gives up and then leaves the endpoint
   * looking idle. A fresh TCP connection tells which: the engine's kernel answers it however
   * busy the engine is. Each one that does not open counts, a second apart, until the endpoint is
   * out or one opens: a partitioned engine is ejected about four seconds after its first
   * timed-out scrape instead of never. Requests already there are left alone: a live stream is
   * never cut on a guess.
   */
  private async judgeFailure(endpoint: Endpoint, reason: UpstreamFailure | 'overdue'): Promise<void> {
    switch (reason) {
      case 'connect_refused':
        this.onUnreachable(endpoint);
        return;
      // The pool was closed under the scrape: the replica left the table, its engine did not fail.
      case 'endpoint_closed':
        return;
      // A connect timeout is probed too: for a TLS endpoint it covers the handshake, which a busy
      // engine may be slow to answer.
      case 'connect_timeout':
      case 'overdue':
      case 'connection_reset':
      case 'idle_timeout':
      case 'status_503':
      case 'mid_stream':
      case 'other':
        break;
    }
    for (let probe = 0; probe < EJECT_AFTER_FAILURES && !this.stopped; probe++) {
      const startedAt = performance.now();
      // One that opens ends the streak: isolated lost SYNs over days never add up to an ejection.
      if (await reachable(endpoint.url, REACH_TIMEOUT_MS)) return endpoint.reachedAgain();
      this.onUnreachable(endpoint);
      if (endpoint.ejected) return;
      // A refused connect answers at once: spaced like the timed-out ones, a restart's blip of a
      // second is not three failures.
      await delay(Math.max(0, REACH_TIMEOUT_MS - (performance.now() - startedAt)), undefined, { ref: false });
    }
  }
}
