// The router's HTTP servers and their lifecycle: the public one (node:http with the router's
// request and response classes) and the admin one (http/admin.ts), the route refresher and the load
// scraper started before they listen, and a close that lets requests in flight finish. Router
// side; what each public request gets is http/core.ts.
import http from 'node:http';
import type { Server as NetServer } from 'node:net';
import type { Registry } from 'prom-client';
import { createAdminServer, listenAdmin, type RouterHealth } from './admin.js';
import { adminUrl } from './admin-addr.js';
import type { KvStreamState } from '../kv/events.js';
import { RouterCore } from './core.js';
import type { ApiKeys } from './auth.js';
import type { LoadReport } from '../autoscale/load-report.js';
import type { RouterOptions } from '../options.js';
import { internalError, RouterRequest, RouterResponse } from './request.js';

export { DEFAULT_BODY_LIMIT, type RouterOptions } from '../options.js';
export type { RouterHealth } from './admin.js';

export interface Router {
  port: number;
  /** The admin listener's TCP port (/metrics, detailed /health); undefined when it is off or on a Unix socket. */
  adminPort: number | undefined;
  /** This router's prom-client registry. */
  registry: Registry;
  /** Reads the route source now (tests; the router also polls on its own). */
  refreshRoutes(): Promise<void>;
  health(): RouterHealth;
  /** This process's waiting lines and engine loads, for the autoscaler. */
  loadReport(): LoadReport;
  /** Serves these API keys from now on (a reloaded keys file); says what changed, by counts. */
  replaceApiKeys(keys: ApiKeys): string;
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
  // A client that sends `Expect: 100-continue` (curl does for large bodies) learns of a refusal
  // (key, limits, budget) before it uploads the body.
  server.on('checkContinue', (req: RouterRequest, res: RouterResponse) => {
    try {
      core.handle(req, res, true);
    } catch (err) {
      internalError(res, err);
    }
  });
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    else socket.destroy();
  });

  await listen(server, options.port ?? 8080, options.host ?? '127.0.0.1');
  const port = boundPort(server, options.port ?? 0);
  const admin =
    options.admin === undefined
      ? undefined
      : createAdminServer({
          health: () => detailedHealth(core),
          metricsText: core.metricsText,
          metricsContentType: core.metrics.registry.contentType,
        });
  let adminPort: number | undefined;
  if (admin !== undefined && options.admin !== undefined) {
    try {
      adminPort = await listenAdmin(admin, options.admin);
    } catch (err) {
      server.close();
      throw new Error(`router: admin listener ${adminUrl(options.admin, undefined)}: ${(err as Error).message}`, { cause: err });
    }
  }

  let closed: Promise<void> | undefined;
  const close = (graceMs = 5000): Promise<void> => {
    closed ??= (async () => {
      clearInterval(syncSourceGauge);
      core.scraper.stop();
      admin?.close();
      admin?.closeAllConnections();
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
      core.adapters?.close();
      await core.state.close();
    })();
    return closed;
  };

  return {
    port,
    adminPort,
    registry: core.metrics.registry,
    refreshRoutes: () => core.refresher.refresh(),
    health: () => detailedHealth(core),
    loadReport: () => core.loadReport(),
    replaceApiKeys: (keys) => core.replaceApiKeys(keys),
    close,
  };
}

function listen(server: NetServer, port: number, host: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function boundPort(server: NetServer, fallback: number): number {
  const address = server.address();
  return typeof address === 'object' && address !== null ? address.port : fallback;
}

/** The admin listener's /health: the route source, the engines as this router sees them, what it holds. */
export function detailedHealth(core: RouterCore): RouterHealth {
  const ejected: string[] = [];
  let endpoints = 0;
  let kvEvents: Record<string, KvStreamState> | undefined;
  const now = performance.now();
  for (const e of core.state.liveEndpoints()) {
    endpoints++;
    if (e.ejected) ejected.push(e.url);
    if (e.kv !== undefined) (kvEvents ??= {})[e.url] = e.kv.state(now);
  }
  return {
    status: core.status(),
    routes: core.refresher.status(),
    models: core.state.routableModelCount(),
    endpoints,
    ejected,
    queued: core.waiting.depths(),
    line: core.waiting.lines(),
    heldBytes: { used: core.budget.used, limit: core.budget.limit },
    ...(kvEvents === undefined ? {} : { kvEvents }),
    ...(core.adapters === undefined ? {} : { adapters: core.adapters.loadedByEndpoint() }),
    ...(core.insecure === undefined ? {} : { insecure: core.insecure }),
  };
}
