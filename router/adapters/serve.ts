// One request for a LoRA adapter at the router: held while its adapter is loaded (when no
// replica has it), then handed to an Exchange over the replicas that hold it, like any model's
// request. A failed load is answered 502 (503 when the engine could not be reached) with the
// engine's own reason. Router side.
import { AdapterLoadError } from './engines.js';
import type { AdapterSpec } from './catalog.js';
import type { Endpoint } from '../engines/endpoint.js';
import type { ModelPool } from '../engines/model-pool.js';
import { sendError } from '../http/errors.js';
import { Exchange, type ProxySettings } from '../engines/exchange.js';
import type { ExchangeResponse, RoutedRequest } from '../engines/routed-request.js';

/** An adapter's request resolved: the adapter, and the pool of its base model. */
export interface AdapterTarget {
  spec: AdapterSpec;
  base: ModelPool;
}

/** What serving an adapter's request asks of the adapter router (adapters/router.ts). */
export interface AdapterServing {
  /** The replicas that hold the adapter, loading it first where none does; release when sent. */
  poolFor(target: AdapterTarget, now: number): Promise<{ pool: ModelPool; release: () => void }>;
  /** Marks the adapter in use on a replica until the returned function is called. */
  using(e: Endpoint, name: string, now: number): () => void;
}

export function serveAdapter(
  adapters: AdapterServing,
  proxy: ProxySettings,
  target: AdapterTarget,
  res: ExchangeResponse,
  request: RoutedRequest,
): void {
  const name = target.spec.name;
  adapters.poolFor(target, performance.now()).then(
    ({ pool, release }) => {
      if (res.destroyed || res.writableEnded) return release();
      if (pool.endpoints.length === 0) {
        release();
        pool.metrics.refused(503);
        return sendError(res, 'no_replica', `No replica of \`${target.base.servedName}\` holds adapter \`${name}\` now; please retry.`);
      }
      const exchange = new Exchange(proxy, res, pool, request);
      // Recent and in use on every replica that holds it: unloaded there last.
      const now = performance.now();
      const done = pool.endpoints.map((e) => adapters.using(e, name, now));
      release();
      res.once('close', () => {
        for (const end of done) end();
      });
      exchange.start();
    },
    (err: unknown) => {
      const status = err instanceof AdapterLoadError ? err.status : 0;
      const reason = err instanceof Error ? err.message : String(err);
      target.base.metrics.refused(status === 0 ? 503 : 502);
      sendError(
        res,
        status === 0 ? 'upstream_unavailable' : 'upstream_failed',
        `Adapter \`${name}\` of \`${target.base.servedName}\` could not be loaded: ${reason}`,
      );
    },
  );
}
