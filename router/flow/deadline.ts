// Deadlines a caller sets on a request (`x-llmgw-slo-ttft-ms`, `x-llmgw-slo-tpot-ms`) and the
// router's prediction of a request's time to first token and per output token on each replica,
// from what it already measures: the engine's free slots (its running and waiting counts), what
// a request holds a slot for (serviceMs), the prefills queued ahead there, what a prompt token
// costs to prefill, and the decode time per token, all learned from the engine's own counters
// (engines/endpoint.ts). Router side; pure.
import type { EngineCosts } from '../policies/policy.js';

export const TTFT_HEADER = 'x-llmgw-slo-ttft-ms';
export const TPOT_HEADER = 'x-llmgw-slo-tpot-ms';
/** A deadline longer than the longest a request may be held means nothing to flow control. */
const MAX_DEADLINE_MS = 3_600_000;

export interface Deadline {
  /** Milliseconds from arrival to the first token; undefined: none asked. */
  readonly ttftMs: number | undefined;
  /** Milliseconds per output token after the first; undefined: none asked. */
  readonly tpotMs: number | undefined;
}

/** The request's deadlines, undefined when it asks none, or an Error that says what is wrong. */
export function parseDeadline(headers: Record<string, string | string[] | undefined>): Deadline | undefined | Error {
  const ttft = millis(headers[TTFT_HEADER], TTFT_HEADER);
  if (ttft instanceof Error) return ttft;
  const tpot = millis(headers[TPOT_HEADER], TPOT_HEADER);
  if (tpot instanceof Error) return tpot;
  return ttft === undefined && tpot === undefined ? undefined : { ttftMs: ttft, tpotMs: tpot };
}

function millis(value: string | string[] | undefined, name: string): number | undefined | Error {
  if (value === undefined) return undefined;
  const text = Array.isArray(value) ? (value[0] ?? '') : value;
  const n = Number(text.trim());
  if (text.trim() === '' || !Number.isFinite(n) || n <= 0 || n > MAX_DEADLINE_MS)
    return new Error(`${name} must be a number of milliseconds from 1 to ${MAX_DEADLINE_MS}`);
  return n;
}

/** What a prediction needs to know about one replica's engine (engines/endpoint.ts Endpoint is one). */
export interface Predictable {
  readonly costs: EngineCosts;
  /** Requests sent there without a byte of answer yet. */
  readonly prefilling: number;
  /** Free slots if nothing more were sent (negative: a line); Infinity when its capacity is unknown. */
  freeSlots(): number;
  /** Slots it runs at once; NaN until learned. */
  concurrency(): number;
}

/**
 * Milliseconds from now to the first token of a request of `promptBytes` sent to `e` now: the
 * wait for a slot when the engine has none free (one frees every serviceMs / slots), the
 * prefills queued ahead of it, its own prefill, and one decode step.
 */
export function predictTtftMs(e: Predictable, promptBytes: number): number {
  const { costs } = e;
  const free = e.freeSlots();
  const slots = e.concurrency();
  let ms = 0;
  if (free <= 0) ms += ((1 - free) * costs.serviceMs) / (Number.isFinite(slots) && slots > 0 ? slots : 1);
  // Prefills there that are not finished run before this one's, one after another.
  const queuedForSlot = free < 0 ? -free : 0;
  ms += Math.max(0, e.prefilling - queuedForSlot) * costs.prefillMs;
  ms += (promptBytes / Math.max(1, costs.bytesPerToken)) * costs.prefillMsPerToken;
  return ms + (costs.tpotMs ?? 0);
}

/**
 * Milliseconds a request waits in the router's line before it is sent, with `ahead` requests
 * before it: each leaves as a slot frees on one of the model's replicas.
 */
export function predictLineMs(ahead: number, replicas: readonly Predictable[]): number {
  if (ahead <= 0 || replicas.length === 0) return 0;
  let rate = 0;
  for (const e of replicas) {
    const slots = e.concurrency();
    // Slots freed per millisecond there.
    rate += (Number.isFinite(slots) && slots > 0 ? slots : 1) / Math.max(1, e.costs.serviceMs);
  }
  return ahead / rate;
}

/** The decode time per token there, once known. */
export function predictTpotMs(e: Predictable): number | undefined {
  return e.costs.tpotMs;
}

/**
 * Of the replicas, those predicted to meet the deadline and the best prediction among all
 * (what a refusal quotes). `lineMs` is the wait in the router's line before any of them.
 */
export function meeting<T extends Predictable>(
  deadline: Deadline,
  replicas: readonly T[],
  promptBytes: number,
  lineMs: number,
): { meets: T[]; bestTtftMs: number; bestTpotMs: number | undefined } {
  const meets: T[] = [];
  let bestTtftMs = Infinity;
  let bestTpotMs: number | undefined;
  for (const e of replicas) {
    const ttft = lineMs + predictTtftMs(e, promptBytes);
    const tpot = predictTpotMs(e);
    if (ttft < bestTtftMs) bestTtftMs = ttft;
    if (tpot !== undefined && (bestTpotMs === undefined || tpot < bestTpotMs)) bestTpotMs = tpot;
    const ttftOk = deadline.ttftMs === undefined || ttft <= deadline.ttftMs;
    const tpotOk = deadline.tpotMs === undefined || tpot === undefined || tpot <= deadline.tpotMs;
    if (ttftOk && tpotOk) meets.push(e);
  }
  return { meets, bestTtftMs, bestTpotMs };
}
