// One replica endpoint as the router tracks it: its connection pool, the work this router has
// in flight there, the engine's own load from its metrics, whether it is ejected for failing,
// and whether it is saturated (flow control). Router side; the balancer and the waiting room
// read it, the proxy and the scraper write it.
import type { Pool } from 'undici';
import { NO_ENGINE_KEY, type EngineAuth } from './upstream.js';
import { DEFAULT_COSTS, type Candidate, type EngineCosts } from '../policies/policy.js';

/**
 * What the router asks of an engine's KV-cache event stream (kv/events.ts KvEventStream): the
 * blocks it holds, whether its events are live, and its state for the admin report. Declared
 * here so that an endpoint, which every routing module reads, does not pull in the stream.
 */
export interface EngineKvEvents {
  readonly blockSize: number;
  readonly index: { matched(blocks: readonly number[]): number };
  live(now: number): boolean;
  expectEvents(now: number): void;
  state(now: number): 'live' | 'down' | 'silent';
  close(): void;
}

/** The load an engine reports on /metrics (vLLM or SGLang names). */
export interface EngineLoad {
  running: number;
  waiting: number;
  /** KV-cache (or token) usage, 0..1. */
  kvUsage: number;
  /** A counter of the requests the engine has handled (vLLM's successes, SGLang's total), when it exports one. */
  requests?: number;
  /** Counters (vLLM's phase histograms and token counters), when exported: what a prefill and a request cost. */
  prefillSeconds?: number;
  inferenceSeconds?: number;
  inferenceCount?: number;
  promptTokens?: number;
  cachedTokens?: number;
  /** Seconds spent decoding, and tokens generated: their ratio is the time per output token. */
  decodeSeconds?: number;
  generationTokens?: number;
}

/** Weight of the newest scrape interval in the running costs. */
const COST_EWMA = 0.3;

/** An engine's load as last scraped, and this router's requests there: what the autoscaler reads. */
export interface EngineSample {
  running: number;
  waiting: number;
  kvUsage: number;
  /** The engine's request counter; -1 when it exports none. */
  requests: number;
  /** Requests this router process has in flight there now. */
  inflight: number;
  /** Date.now() of the scrape; 0 when never scraped. */
  at: number;
}

/** Consecutive failures that take an endpoint out of rotation. */
export const EJECT_AFTER_FAILURES = 3;
const EJECT_BASE_MS = 1000;
const EJECT_MAX_MS = 30_000;
/** A full KV cache means the engine is about to preempt: as bad as this many more requests. */
const KV_WEIGHT = 4;

export class Endpoint implements Candidate {
  inflight = 0;
  /**
   * Requests this router sent that have not had a byte of their body yet: still queued or
   * prefilling there. Prefills run one after another, so each delays the next one sent.
   */
  prefilling = 0;
  /** The engine's KV-cache events, when the router follows them (--kv-events). */
  kv: EngineKvEvents | undefined = undefined;
  /** Request body bytes this router has sent here: with the engine's prompt tokens, how many make a token. */
  bytesSent = 0;
  private bytesAtScrape = 0;
  /** Requests the engine had beyond ours at the last scrape: other routers, direct clients. */
  private foreign = 0;
  private running = 0;
  private waiting = 0;
  private kvUsage = 0;
  private requests = -1;
  private scrapedAt = 0;
  /** This router's in flight at the last scrape: the engine's counts include them. */
  private inflightAtScrape = 0;
  /**
   * How many requests the engine runs at once, learned from a scrape that showed a waiting line
   * (it was full then); undefined until one has. vLLM's max_num_seqs, or fewer when the KV
   * cache is what limits it.
   */
  private capacity: number | undefined = undefined;
  private consecutiveFailures = 0;
  /** The engine's counters at the last scrape that had them, for the costs' deltas. */
  private counters: EngineLoad | undefined;
  readonly costs: EngineCosts = { ...DEFAULT_COSTS };
  /** Whether the costs are the engine's own yet (the first measurement replaces the defaults). */
  private costsLearned = false;
  private prefillLearned = false;
  /** Times ejected in a row without a success in between; doubles the ejection each time. */
  private ejections = 0;
  /** performance.now() until which the endpoint is out; 0 when in rotation. */
  private ejectedUntil = 0;

  constructor(
    readonly url: string,
    readonly pool: Pool,
    /** The engine's key as headers: every call to it, proxied or the router's own, carries them. */
    readonly auth: EngineAuth = NO_ENGINE_KEY,
    /** The pin of its TLS certificate (its signed route's); undefined: plain HTTP. */
    readonly tlsPin?: string,
  ) {}

  score(): number {
    return this.inflight + this.foreign + this.waiting + KV_WEIGHT * this.kvUsage;
  }

  load(): number {
    return this.inflight + this.foreign;
  }

  reportsLoad(): boolean {
    return this.scrapedAt !== 0;
  }

  concurrency(): number {
    return this.capacity ?? NaN;
  }

  queued(): number {
    if (this.capacity !== undefined) return Math.max(0, this.inflight + this.foreign + 1 - this.capacity);
    // Capacity not learned yet: an engine that had no line at the last scrape is taken to have
    // room (the in-flight guard bounds the guess); one that had a line, that line, moved by what
    // this router sent or saw finish since.
    if (this.scrapedAt === 0 || this.waiting === 0) return 0;
    return Math.max(0, this.waiting + (this.inflight - this.inflightAtScrape));
  }

  available(_now: number): boolean {
    return this.ejectedUntil === 0;
  }

  get ejected(): boolean {
    return this.ejectedUntil !== 0;
  }

  /** A request got an answer from this engine (any status but a 503 before the first byte). */
  recordSuccess(): void {
    this.consecutiveFailures = 0;
    this.ejections = 0;
    this.ejectedUntil = 0;
  }

  /** A fresh connection to it opened: the failures counted so far were blips, unless it is out already. */
  reachedAgain(): void {
    if (this.ejectedUntil === 0) this.consecutiveFailures = 0;
  }

  /** A connection error or 503 before the first byte. True when this failure ejected the endpoint. */
  recordFailure(now: number): boolean {
    this.consecutiveFailures++;
    if (this.ejectedUntil !== 0 || this.consecutiveFailures < EJECT_AFTER_FAILURES) return false;
    this.ejections++;
    this.ejectedUntil = now + Math.min(EJECT_MAX_MS, EJECT_BASE_MS * 2 ** (this.ejections - 1));
    return true;
  }

  /**
   * The scraper reached the engine. An ejected endpoint comes back once its ejection time is
   * over and a probe succeeds, on probation: one more failure ejects it again, for longer.
   */
  probeSucceeded(now: number, load: EngineLoad | undefined): void {
    if (load) {
      this.foreign = Math.max(0, load.running + load.waiting - this.inflight);
      this.running = load.running;
      this.waiting = load.waiting;
      this.kvUsage = load.kvUsage;
      this.requests = load.requests ?? -1;
      this.scrapedAt = Date.now();
      this.inflightAtScrape = this.inflight;
      // A line with nothing running (a start, a prompt the KV cache cannot hold) says nothing of
      // how many it runs: a capacity of 0 would hold every request back for good.
      if (load.waiting > 0 && load.running > 0) this.capacity = load.running;
      else if (this.capacity !== undefined && load.running > this.capacity) this.capacity = load.running;
      this.learnCosts(load);
    }
    if (this.ejectedUntil !== 0 && now >= this.ejectedUntil) {
      this.ejectedUntil = 0;
      this.consecutiveFailures = EJECT_AFTER_FAILURES - 1;
    }
  }

  private learnCosts(load: EngineLoad): void {
    const before = this.counters;
    this.counters = load;
    if (before === undefined) return;
    const served = (load.inferenceCount ?? 0) - (before.inferenceCount ?? 0);
    const busy = (load.inferenceSeconds ?? 0) - (before.inferenceSeconds ?? 0);
    // A counter that went back means the engine restarted: start again from this scrape.
    if (served > 0 && busy > 0) {
      const ms = (busy * 1000) / served;
      this.costs.serviceMs = this.costsLearned ? this.costs.serviceMs + COST_EWMA * (ms - this.costs.serviceMs) : ms;
      this.costsLearned = true;
    }
    const bytes = this.bytesSent - this.bytesAtScrape;
    this.bytesAtScrape = this.bytesSent;
    const tokens = (load.promptTokens ?? 0) - (before.promptTokens ?? 0);
    // Only while this router's requests are all the engine saw (others' would count as ours).
    if (bytes > 0 && tokens > 0 && this.foreign === 0) this.costs.bytesPerToken += COST_EWMA * (bytes / tokens - this.costs.bytesPerToken);
    const prefilled = (load.promptTokens ?? 0) - (load.cachedTokens ?? 0) - ((before.promptTokens ?? 0) - (before.cachedTokens ?? 0));
    const prefill = (load.prefillSeconds ?? 0) - (before.prefillSeconds ?? 0);
    if (served > 0) this.costs.prefillMs += COST_EWMA * ((prefill * 1000) / served - this.costs.prefillMs);
    const decoded = (load.generationTokens ?? 0) - (before.generationTokens ?? 0);
    const decoding = (load.decodeSeconds ?? 0) - (before.decodeSeconds ?? 0);
    if (decoded > 0 && decoding > 0) {
      const ms = (decoding * 1000) / decoded;
      this.costs.tpotMs = this.costs.tpotMs === undefined ? ms : this.costs.tpotMs + COST_EWMA * (ms - this.costs.tpotMs);
    }
    if (prefilled > 0 && prefill > 0) {
      const ms = (prefill * 1000) / prefilled;
      this.costs.prefillMsPerToken = this.prefillLearned
        ? this.costs.prefillMsPerToken + COST_EWMA * (ms - this.costs.prefillMsPerToken)
        : ms;
      this.prefillLearned = true;
    }
  }

  /** The scraper could not reach the engine: its last load says nothing any more. */
  probeFailed(): void {
    this.foreign = 0;
    this.running = 0;
    this.waiting = 0;
    this.kvUsage = 0;
    this.scrapedAt = 0;
  }

  /**
   * More than `threshold` requests would wait at the engine if one more were sent: its line as
   * last scraped, moved by what this router sent or saw finish since. An engine whose metrics
   * say nothing, or that has never shown a line, is never saturated: flow control must not
   * hold requests back on a guess.
   */
  saturated(threshold: number): boolean {
    return -this.freeSlots() >= threshold;
  }

  /**
   * Slots the engine has free if one more request were not sent: its capacity less this router's
   * requests there now and the others' it held at the last scrape; negative when it has a line.
   * This router's own count is live, not the scrape's: a scrape taken between a send and the
   * engine's sight of it (or an end and the router's) would show a slot free that is not.
   * Infinity while its capacity is unknown (flow control acts on no guess).
   */
  freeSlots(): number {
    if (this.capacity === undefined || this.scrapedAt === 0) return Infinity;
    return this.capacity - (this.inflight + this.foreign);
  }

  sample(): EngineSample {
    return {
      running: this.running,
      waiting: this.waiting,
      kvUsage: this.kvUsage,
      requests: this.requests,
      inflight: this.inflight,
      at: this.scrapedAt,
    };
  }
}
