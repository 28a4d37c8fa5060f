// What an Exchange (engines/exchange.ts) asks of the router around it: its model's pool, the
// proxy settings, and flow control's hooks for a request it sends. Declared apart so that the
// pools, the waiting room and tests name these shapes without the Exchange's machinery.
// Router side.
import type { Endpoint } from './endpoint.js';
import type { ModelMetrics, RouterMetrics } from '../metrics.js';
import type { EligiblePick } from './model-pool.js';
import type { RoutedRequest } from './routed-request.js';
import type { FlowClass } from '../flow/priority.js';

/** What an exchange asks of its model's pool (engines/model-pool.ts), not how pools are built. */
export interface ExchangeModel {
  readonly servedName: string;
  readonly endpoints: readonly Endpoint[];
  readonly metrics: Pick<ModelMetrics, 'record'>;
  readonly queue: { readonly size: number; readonly shares?: FlowShares };
  readonly adapterLost: ((e: Endpoint) => void) | undefined;
  pick(request: EligiblePick, tried: Endpoint[] | undefined, now: number): Endpoint | undefined;
}

export interface ProxySettings {
  metrics: RouterMetrics;
  /** The current pool for a model: a retry picks from the table as it is now. */
  lookup(model: string): ExchangeModel | undefined;
  /** Tries per request, the first included. */
  maxAttempts: number;
  /** A request of a model with requests waiting at the router has finished: one may go now. */
  released?(model: ExchangeModel): void;
  /** Name the engine that answered in x-llmgw-endpoint (--debug-headers). */
  debugHeaders: boolean;
  /** Flow control's view of a request once sent (flow/waiting-room.ts): its prediction and its first token. */
  flow?: FlowRecorder;
}

/** What flow control counts per tenant (flow/tenant-shares.ts): requests in flight. */
export interface FlowShares {
  started(flow: FlowClass, now: number): void;
  finished(flow: FlowClass, now: number): void;
}

/** What flow control learns from a request it let go (flow/waiting-room.ts). */
export interface FlowRecorder {
  /** Its first attempt is going to `endpoint`: predict its first token. */
  sending(model: string, request: RoutedRequest, endpoint: Endpoint, now: number): void;
  /** Its answer's first byte came (`sse`: a stream, whose first byte is its first token). */
  firstByte(model: string, request: RoutedRequest, at: number, sse: boolean): void;
}
