// The one interface every routing policy implements (one file each in this folder, as llm-d's
// scorers are laid out), what a policy may know about a replica, and the policy an operator names.
// Pure logic over Candidates; the router's Endpoint is one. Router side.
import type { EngineCosts } from '../endpoint.js';

/**
 * How a model's requests are spread: cache-aware (the default), least-loaded (power of two
 * choices; affinity turned off), or round-robin (for comparison in bench:affinity only).
 */
export const POLICY_NAMES = ['cache-aware', 'least-loaded', 'round-robin'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

/** What a policy is told about one request (beyond the candidates). */
export interface PickRequest {
  /** Cache-aware keys: the session and the prompt's start (-1: none). */
  readonly session: number;
  readonly prefix: number;
  /** What is sent, for the size of its prompt and its KV blocks. */
  readonly body?: Buffer | undefined;
}

/** A routing policy: which of a model's endpoints takes a request's first attempt. Retries go least-loaded. */
export interface RoutingPolicy<T extends Candidate> {
  readonly name: PolicyName;
  /** The endpoint for the request among `candidates` (the model's endpoints now); undefined when there is none. */
  pick(candidates: readonly T[], request: PickRequest, now: number): T | undefined;
}

/** What the balancer needs to know about a replica's endpoint. */
export interface Candidate {
  readonly url: string;
  /** Requests this router has in flight there. */
  inflight: number;
  /** Lower is better: in-flight work plus what the engine's metrics say beyond it. */
  score(): number;
  /** Requests the engine holds: this router's in flight and, from its metrics, everybody else's. */
  load(): number;
  /** False while ejected for failing. */
  available(now: number): boolean;
  // What load before locality weighs (affinity.ts); a candidate without them is guarded by in-flight gaps.
  /** Requests that would wait ahead of one more sent now. */
  queued?(): number;
  /** Requests sent there without a byte of answer yet (queued or prefilling). */
  readonly prefilling?: number;
  /** Requests the engine runs at once; NaN until learned. */
  concurrency?(): number;
  /** Whether the engine's load has been read (its metrics page); queued() means nothing before. */
  reportsLoad?(): boolean;
  /** What a request and a prefilled token cost on it. */
  readonly costs?: EngineCosts;
}

export function eligible(c: Candidate, tried: readonly Candidate[] | undefined, now: number, ignoreHealth: boolean): boolean {
  return (ignoreHealth || c.available(now)) && (tried === undefined || !tried.includes(c));
}
