// The router's admin listener: /metrics (Prometheus) and the detailed /health (route source and
// its errors, held routes, ejected engine URLs, waiting lines). Loopback by default, never on the
// public listener: what it shows tells an attacker where the engines are and what is failing.
// Router side; the public listener answers only `{"status"}` on /health (core.ts).
import http from 'node:http';
import type { RouterCore } from './core.js';
import { sendError } from './errors.js';
import type { KvStreamState } from './kv-events.js';
import type { SourceStatus } from './refresher.js';
import { sendJson } from './request.js';

export interface RouterHealth {
  status: 'ok' | 'degraded';
  routes: SourceStatus;
  models: number;
  endpoints: number;
  ejected: string[];
  /** Requests held at this router, by model. */
  queued: Record<string, number>;
  /** Bytes of request bodies held in memory, and the budget (--held-bytes). */
  heldBytes: { used: number; limit: number };
  /** Each followed engine's KV-event stream (live: scored by its blocks; else by homes), by endpoint. */
  kvEvents?: Record<string, KvStreamState>;
  /** LoRA adapters each engine holds, as this router last read them (when it serves adapters). */
  adapters?: Record<string, string[]>;
}

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
    heldBytes: { used: core.budget.used, limit: core.budget.limit },
    ...(kvEvents === undefined ? {} : { kvEvents }),
    ...(core.adapters === undefined ? {} : { adapters: core.adapters.loadedByEndpoint() }),
  };
}

/** The admin listener's server; not yet listening. */
export function createAdminServer(core: RouterCore): http.Server {
  const server = http.createServer({ keepAliveTimeout: 65_000, requestTimeout: 30_000, headersTimeout: 10_000 }, (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, 'method_not_allowed', `${req.method ?? ''} is not allowed`);
    switch (path) {
      case '/health':
        return sendJson(res, 200, JSON.stringify(detailedHealth(core)));
      case '/metrics':
        void core.metricsText().then(
          (text) => {
            res.writeHead(200, { 'content-type': core.metrics.registry.contentType, 'content-length': Buffer.byteLength(text) });
            res.end(text);
          },
          (err: unknown) => sendError(res, 'internal', `metrics: ${(err as Error).message}`),
        );
        return;
      default:
        return sendError(res, 'unknown_path', `No route for ${req.method} ${path}`);
    }
  });
  server.on('clientError', (_err, socket) => socket.destroy());
  return server;
}
