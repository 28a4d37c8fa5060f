// One request for a LoRA adapter at the router: held while its adapter is loaded (when no
// replica has it), then handed to an Exchange over the replicas that hold it, like any model's
// request. A failed load is answered 502 (503 when the engine could not be reached) with the
// engine's own reason. Router side.
import { AdapterLoadError } from './adapter-engines.js';
import type { AdapterRouter, AdapterTarget } from './adapter-router.js';
import { sendError } from './errors.js';
import { Exchange, type ExchangeResponse, type ProxySettings } from './proxy.js';

export function serveAdapter(
  adapters: AdapterRouter,
  proxy: ProxySettings,
  target: AdapterTarget,
  res: ExchangeResponse,
  path: string,
  body: Buffer,
  session: number,
  prefix: number,
  startedAt: number,
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
      const exchange = new Exchange(proxy, res, pool, path, body, session, prefix, startedAt);
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
