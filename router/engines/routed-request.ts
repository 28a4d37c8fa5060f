// One request as the router sends it on, built once when its body has been read and its model
// found (http/route.ts): everything the Exchange, the waiting room and the adapter path need, in
// one object rather than fields handed along one by one; and the response it is answered on.
// Router side.
import type { ServerResponse } from 'node:http';
import type { FlowClass } from '../flow/priority.js';
import type { Deadline } from '../flow/deadline.js';
import type { Endpoint } from './endpoint.js';

export interface RoutedRequest {
  /** The path as the client sent it (query included); the engine gets the same. */
  readonly path: string;
  /** The body as the engine gets it: a deployment's name already replaced by its served name. */
  readonly body: Buffer;
  /** Cache-aware keys (kv/hashing.ts): the session's and the prompt prefix's hash; -1 for none. */
  readonly session: number;
  readonly prefix: number;
  /** performance.now() when routing began: latency and time to first token are counted from here. */
  readonly startedAt: number;
  /** Its tenant, weight and priority (flow/priority.ts): where it waits in a line, and who it counts against. */
  readonly flow: FlowClass;
  /** What its caller asked of its first token and the tokens after (x-llmgw-slo-ttft-ms, -tpot-ms); undefined: nothing. */
  readonly deadline: Deadline | undefined;
  /** The replicas its first attempt may go to (flow control's kept slots, its deadline); undefined: any. */
  eligible: ((endpoint: Endpoint) => boolean) | undefined;
  /** The time to first token flow control predicted for it, in ms, once sent; -1: none. */
  predictedTtftMs: number;
}

/** The router's ServerResponse, carrying its exchange so that module-level listeners find it. */
export interface ExchangeResponse extends ServerResponse {
  /** The Exchange answering it (engines/exchange.ts), told when the client goes or can take more. */
  exchange: { clientClosed(): void; resumeUpstream(): void } | undefined;
  /** The API key's gate (http/limits.ts KeyGate) when keys are configured. */
  gate: AnsweringKey | undefined;
}

/**
 * What answering a request needs of its API key's gate: the key's place in the key list (the
 * waiting room's turns) and its token counters (engines/usage.ts). Declared here, not taken from
 * http/limits.ts, so that a request's shape depends on nothing else in the router.
 */
export interface AnsweringKey {
  readonly key: { readonly index: number };
  readonly metrics: {
    readonly promptTokens: { inc(value?: number): void };
    readonly completionTokens: { inc(value?: number): void };
  };
}
