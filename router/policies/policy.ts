// The one interface every routing policy implements (one file each in this folder, as llm-d's
// scorers are laid out), what a policy may know about a replica and about a request (its cached
// blocks), and the policy an operator names. Pure logic over Candidates; the router's Endpoint is
// one. Router side.

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
  // What load before locality weighs (affinity-table.ts); a candidate without them is guarded by in-flight gaps.
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

/** What requests cost on an engine, learned from its counters; defaults until it has served some. */
export interface EngineCosts {
  /** Request body bytes per prompt token (what the router sent over what the engine counted). */
  bytesPerToken: number;
  /** Milliseconds a request holds one of the engine's slots (vLLM's inference time). */
  serviceMs: number;
  /** Milliseconds of prefill per prompt token not found in the cache. */
  prefillMsPerToken: number;
  /** Milliseconds of prefill per request, on average (mostly hits, when routing works). */
  prefillMs: number;
  /** Milliseconds per generated token, once the engine's counters have shown it. */
  tpotMs?: number;
}

/** Before an engine has shown its own: a request of a second, prefill at 20,000 tokens a second. */
export const DEFAULT_COSTS: EngineCosts = { bytesPerToken: 4, serviceMs: 1000, prefillMsPerToken: 0.05, prefillMs: 0 };

/** How a request was placed: where its key was cached, elsewhere for load (a new home), or as a new key. */
export type AffinityResult = 'home' | 'diverted' | 'new';

/** What the precise index knows about one request on the model's replicas (kv/block-index.ts). */
export interface CachedBlocks<T> {
  /** The request's blocks in the engines' naming, and tokens per block. */
  readonly blocks: readonly number[];
  readonly blockSize: number;
  /** Whether this replica's events are live: if not, its homes (approximate) are used. */
  live(c: T): boolean;
  /** Leading blocks of the request that this replica holds. */
  matched(c: T): number;
}

/** What a pick needs to know about the request beyond its keys. */
export interface RequestShape<T> {
  /** The request body's bytes: prompt tokens are guessed from them with the engines' bytes per token. */
  promptBytes: number;
  precise?: CachedBlocks<T> | undefined;
}
