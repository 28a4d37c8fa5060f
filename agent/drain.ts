// Draining a shard, agent side: read the engine's own in-flight request count from its
// /metrics (vLLM's vllm:num_requests_running and _waiting, SGLang's sglang:num_running_reqs
// and _queue_reqs, llama.cpp's llamacpp:requests_processing and _deferred) locally, a few times a second, and tell the replica only the transition to
// idle. Nothing reaches Temporal while requests finish. Used by the drainShard activity.
import { create } from '@bufbuild/protobuf';
import {
  DrainShardResultSchema,
  ShardState,
  ShardStatusSchema,
  type DrainShard,
  type DrainShardResult,
  type ShardStatus,
} from '../proto/gen/llmgw/v1/shard_pb.js';
import { httpsOf, pinnedDispatcher } from '../common/engine-tls.js';
import { fetch as pinnedFetch } from 'undici';

const POLL_MS = 200;
const FETCH_TIMEOUT_MS = 2_000;
const IN_FLIGHT_METRICS = [
  'vllm:num_requests_running',
  'vllm:num_requests_waiting',
  'sglang:num_running_reqs',
  'sglang:num_queue_reqs',
  'llamacpp:requests_processing',
  'llamacpp:requests_deferred',
];

/** Requests running or waiting, summed over every label set of the known gauges; undefined if none is exported. */
export function inFlightFromMetrics(text: string): number | undefined {
  let total: number | undefined;
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const name = line.slice(0, line.search(/[{\s]/));
    if (!IN_FLIGHT_METRICS.includes(name)) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) total = (total ?? 0) + value;
  }
  return total;
}

export interface DrainerDeps {
  /** The shard's current status (its endpoint and pid), undefined when the agent does not run it. */
  statusOf(shardId: string): ShardStatus | undefined;
  /** The pin of the shard's engine certificate (--engine-tls); undefined: it serves plain HTTP. */
  tlsPinOf?(shardId: string): string | undefined;
  /** Sends a transition to the shard's replica (the agent's notifier). */
  send(status: ShardStatus): void;
  log(line: string): void;
}

export function createDrainer(deps: DrainerDeps) {
  const watching = new Map<string, AbortController>();

  const readInFlight = async (endpoint: string, signal: AbortSignal, pin: string | undefined): Promise<number | undefined> => {
    const url = endpoint.startsWith('http') ? `${endpoint}/metrics` : `http://${endpoint}/metrics`;
    const timed = AbortSignal.any([signal, AbortSignal.timeout(FETCH_TIMEOUT_MS)]);
    // An engine with TLS is read over it, from the certificate its agent issued and nothing else.
    const response = pin
      ? await pinnedFetch(httpsOf(url), { signal: timed, dispatcher: pinnedDispatcher(pin) })
      : await fetch(url, { signal: timed });
    if (!response.ok) return undefined;
    return inFlightFromMetrics(await response.text());
  };

  return {
    /** Starts watching and returns at once with the count now; the idle transition follows as a signal. */
    async drain(request: DrainShard): Promise<DrainShardResult> {
      const status = deps.statusOf(request.shardId);
      if (!status?.endpoint) return create(DrainShardResultSchema, { requestsInFlight: -1 });
      watching.get(request.shardId)?.abort();
      const controller = new AbortController();
      watching.set(request.shardId, controller);
      const pin = deps.tlsPinOf?.(request.shardId);
      const first = await readInFlight(status.endpoint, controller.signal, pin).catch(() => undefined);
      if (first === undefined) {
        watching.delete(request.shardId);
        return create(DrainShardResultSchema, { requestsInFlight: -1 });
      }
      const idle = (): void => {
        deps.send(
          create(ShardStatusSchema, {
            ...status,
            state: ShardState.DRAINING,
            requestsInFlight: 0,
            message: 'drained: no request in flight',
          }),
        );
      };
      if (first === 0) {
        watching.delete(request.shardId);
        return create(DrainShardResultSchema, { requestsInFlight: 0 });
      }
      const deadline = Date.now() + request.timeoutSeconds * 1000;
      deps.log(`draining ${request.shardId}: ${first} request(s) in flight`);
      void (async () => {
        while (!controller.signal.aborted && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, POLL_MS));
          const now = await readInFlight(status.endpoint, controller.signal, pin).catch(() => undefined);
          if (now === 0) {
            deps.log(`drained ${request.shardId}: no request in flight`);
            idle();
            break;
          }
        }
        if (watching.get(request.shardId) === controller) watching.delete(request.shardId);
      })();
      return create(DrainShardResultSchema, { requestsInFlight: first });
    },
    close(): void {
      for (const controller of watching.values()) controller.abort();
      watching.clear();
    },
  };
}
