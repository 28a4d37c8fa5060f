// Per-key admission: a token bucket for requests per second and a count of requests in flight,
// each key's own (the token usage engines report is counted by engines/usage.ts). Router side; a
// refused request gets 429 in OpenAI's shape with Retry-After (http/core.ts).
//
// With --workers N every router process holds its own gates, so each enforces 1/N of a key's
// limits (main.ts divides them): the kernel spreads connections over the processes, and asking
// one process for every admission would put an IPC round trip on every request.
import type { ApiKey } from './auth.js';
import type { KeyMetrics } from '../metrics.js';

export type LimitKind = 'rps' | 'concurrent';

/**
 * Requests in flight (held in the waiting room included) per API key when keys are configured and
 * neither --key-concurrency nor the key's line says otherwise: one key's burst must not take every
 * slot of the waiting room or the byte budget from the others.
 */
export const DEFAULT_KEY_CONCURRENCY = 64;

export interface Refusal {
  limit: LimitKind;
  /** Whole seconds until a retry can pass (Retry-After). */
  retryAfterS: number;
  message: string;
}

export class KeyGate {
  inflight = 0;
  private tokens: number;
  private refilledAt = 0;
  private rps: number | undefined;
  private concurrent: number | undefined;

  constructor(
    public key: ApiKey,
    readonly metrics: KeyMetrics,
    /** The share of the key's limits this process enforces (1 / router processes). */
    private readonly share = 1,
  ) {
    this.rps = undefined;
    this.concurrent = undefined;
    this.tokens = 0;
    this.reconfigure(key);
    this.tokens = this.capacity();
  }

  /**
   * The same key read again from a reloaded keys file: its new scope and limits, keeping the
   * requests it has in flight (they release this gate) and what its bucket holds.
   */
  reconfigure(key: ApiKey): void {
    this.key = key;
    const { rps, concurrent } = key.limits;
    this.rps = rps === undefined ? undefined : rps * this.share;
    this.concurrent = concurrent === undefined ? undefined : Math.max(1, Math.ceil(concurrent * this.share));
    this.tokens = Math.min(this.tokens, this.capacity());
  }

  /** A burst of one second's worth, and at least one request. */
  private capacity(): number {
    return Math.max(1, this.rps ?? 1);
  }

  /** Admits a request (counted in flight until release()) or says which limit refused it. `now` in ms. */
  admit(now: number): Refusal | undefined {
    if (this.concurrent !== undefined && this.inflight >= this.concurrent) {
      this.metrics.limited('concurrent');
      return {
        limit: 'concurrent',
        retryAfterS: 1,
        message: `Rate limit reached for this API key on concurrent requests: limit ${this.key.limits.concurrent}. Please try again once a request has finished.`,
      };
    }
    if (this.rps !== undefined) {
      const cap = this.capacity();
      if (this.refilledAt !== 0) this.tokens = Math.min(cap, this.tokens + ((now - this.refilledAt) / 1000) * this.rps);
      this.refilledAt = now;
      if (this.tokens < 1) {
        this.metrics.limited('rps');
        const retryAfterS = Math.max(1, Math.ceil((1 - this.tokens) / this.rps));
        return {
          limit: 'rps',
          retryAfterS,
          message: `Rate limit reached for this API key on requests per second: limit ${this.key.limits.rps}. Please try again in ${retryAfterS}s.`,
        };
      }
      this.tokens -= 1;
    }
    this.inflight++;
    this.metrics.requests.inc();
    return undefined;
  }

  release(): void {
    this.inflight--;
  }
}
