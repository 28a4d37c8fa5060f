// The router's admin listener: /metrics (Prometheus) and the detailed /health (route source and
// its errors, held routes, ejected engine URLs, waiting lines). Loopback by default, never on the
// public listener: what it shows tells an attacker where the engines are and what is failing.
// Router side; the public listener answers only `{"status"}` on /health (http/core.ts).
import type { LineView } from '../flow/waiting-room.js';
import cluster from 'node:cluster';
import http from 'node:http';
import { prepareSocketPath, restrictSocket } from '../../agent/admin/auth.js';
import type { AdminListen } from './admin-addr.js';
import { sendError } from './errors.js';
import type { KvStreamState } from '../kv/events.js';
import type { SourceStatus } from '../routes/refresher.js';
import { sendJson } from './request.js';

export interface RouterHealth {
  status: 'ok' | 'degraded';
  routes: SourceStatus;
  models: number;
  endpoints: number;
  ejected: string[];
  /** Requests held at this router, by model. */
  queued: Record<string, number>;
  /** Each model's line with requests held: by tenant and priority, with each tenant's requests in flight here. */
  line: Record<string, LineView>;
  /** Bytes of request bodies held in memory, and the budget (--held-bytes). */
  heldBytes: { used: number; limit: number };
  /** Each followed engine's KV-event stream (live: scored by its blocks; else by homes), by endpoint. */
  kvEvents?: Record<string, KvStreamState>;
  /** LoRA adapters each engine holds, as this router last read them (when it serves adapters). */
  adapters?: Record<string, string[]>;
  /** Only with --insecure-routes: that routes are installed unsigned (http/core.ts INSECURE_ROUTES). */
  insecure?: string;
}

/** What the admin listener shows, as the router (http/server.ts) supplies it. */
export interface AdminView {
  health(): RouterHealth;
  metricsText(): Promise<string>;
  /** The Prometheus content type of metricsText's answer. */
  readonly metricsContentType: string;
}

/** The admin listener's server; not yet listening. */
export function createAdminServer(view: AdminView): http.Server {
  const server = http.createServer({ keepAliveTimeout: 65_000, requestTimeout: 30_000, headersTimeout: 10_000 }, (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, 'method_not_allowed', `${req.method ?? ''} is not allowed`);
    switch (path) {
      case '/health':
        return sendJson(res, 200, JSON.stringify(view.health()));
      case '/metrics':
        void view.metricsText().then(
          (text) => {
            res.writeHead(200, { 'content-type': view.metricsContentType, 'content-length': Buffer.byteLength(text) });
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

/**
 * Starts the admin listener where `where` says; resolves to its TCP port (undefined on a socket).
 * A socket left by a router that died is replaced; in a --workers cluster the primary did that
 * before forking (prepareAdminSocket), since a worker would remove the one its siblings share.
 */
export async function listenAdmin(server: http.Server, where: AdminListen): Promise<number | undefined> {
  if (!('path' in where)) {
    await listening(server, (done) => server.listen(where.port, where.host, done));
    const address = server.address();
    return typeof address === 'object' && address !== null ? address.port : where.port;
  }
  if (!cluster.isWorker) prepareAdminSocket(where);
  await listening(server, (done) => server.listen(where.path, done));
  restrictSocket(where.path);
  return undefined;
}

/** Before binding a socket: its directory exists (0700), and a socket a dead router left is gone. */
export function prepareAdminSocket(where: AdminListen | undefined): void {
  if (where !== undefined && 'path' in where) prepareSocketPath(`unix:${where.path}`);
}

function listening(server: http.Server, listen: (done: () => void) => void): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    listen(() => {
      server.off('error', reject);
      resolve();
    });
  });
}
