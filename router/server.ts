// The router's HTTP server and its lifecycle: node:http with the router's request and response
// classes, the route refresher and the load scraper started before it listens, and a close that
// lets requests in flight finish. Router side; what each request gets is core.ts.
import http from 'node:http';
import type { Registry } from 'prom-client';
import { RouterCore, type RouterHealth, type RouterOptions } from './core.js';
import type { LoadReport } from './load-report.js';
import { internalError, RouterRequest, RouterResponse } from './request.js';

export { DEFAULT_BODY_LIMIT, type RouterHealth, type RouterOptions } from './core.js';

export interface Router {
  port: number;
  /** This router's prom-client registry. */
  registry: Registry;
  /** Reads the route source now (tests; the router also polls on its own). */
  refreshRoutes(): Promise<void>;
  health(): RouterHealth;
  /** This process's waiting lines and engine loads, for the autoscaler. */
  loadReport(): LoadReport;
  /** Stops accepting, lets in-flight requests finish for up to `graceMs`, then cuts the rest. */
  close(graceMs?: number): Promise<void>;
}

function openConnections(server: { getConnections(cb: (err: Error | null, count: number) => void): void }): Promise<number> {
  return new Promise((resolve) => server.getConnections((err, count) => resolve(err ? 0 : count)));
}

export async function startRouter(options: RouterOptions): Promise<Router> {
  const log = options.log ?? ((line: string) => console.error(line));
  const core = new RouterCore(options, log);
  await core.refresher.start();
  core.scraper.start();
  const syncSourceGauge = setInterval(() => core.metrics.routeSourceUp.set(core.refresher.status().state === 'ok' ? 1 : 0), 1000);
  core.metrics.routeSourceUp.set(core.refresher.status().state === 'ok' ? 1 : 0);
  syncSourceGauge.unref();

  const server = http.createServer<typeof RouterRequest, typeof RouterResponse>(
    {
      IncomingMessage: RouterRequest,
      ServerResponse: RouterResponse,
      noDelay: true,
      // Longer than any client's idle keep-alive, so that we are not the side that races it.
      keepAliveTimeout: 65_000,
      // Receiving the request (headers and body) has a limit; answering it has none, because a
      // long generation must not be cut.
      requestTimeout: 300_000,
      headersTimeout: 60_000,
    },
    (req, res) => {
      try {
        core.handle(req, res);
      } catch (err) {
        internalError(res, err);
      }
    },
  );
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    else socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 8080, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : (options.port ?? 0);

  let closed: Promise<void> | undefined;
  const close = (graceMs = 5000): Promise<void> => {
    closed ??= (async () => {
      clearInterval(syncSourceGauge);
      core.scraper.stop();
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const deadline = Date.now() + graceMs;
      while ((await openConnections(server)) > 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        server.closeIdleConnections();
      }
      // Requests still waiting for a replica get a clean 503 to retry elsewhere, not a cut
      // connection: answered, then a moment for the answers to leave.
      core.waiting.closeAll();
      const flushBy = Date.now() + 500;
      while ((await openConnections(server)) > 0 && Date.now() < flushBy) {
        await new Promise((r) => setTimeout(r, 20));
        server.closeIdleConnections();
      }
      server.closeAllConnections();
      await stopped;
      await core.refresher.stop();
      await core.state.close();
    })();
    return closed;
  };

  return {
    port,
    registry: core.metrics.registry,
    refreshRoutes: () => core.refresher.refresh(),
    health: () => core.health(),
    loadReport: () => core.loadReport(),
    close,
  };
}
