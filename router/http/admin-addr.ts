// Where `llmgw router` serves its admin listener (/metrics, detailed /health), from --admin-addr:
// by default (`unix`) a Unix socket of mode 0600 in a 0700 directory of the user's own, as the
// agent's admin API is (agent/admin/auth.ts), so that only the router's user can read what it
// shows and no TCP port is taken that nobody named; `unix:PATH` for another socket; HOST:PORT
// for TCP on a port someone chose; `off` for none. Router side.
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';

/** `off`, `unix`, `unix:PATH`, or HOST:PORT (an IPv6 host in brackets). */
export const AdminAddr = z.string().regex(/^(off|unix|unix:.+|(\[[0-9a-fA-F:.]+\]|[^:[\]\s]+):\d{1,5})$/, {
  error: 'must be unix, unix:PATH, HOST:PORT or off',
});

/** Where the admin listener listens: a Unix socket's path, or a TCP address. */
export type AdminListen = { path: string } | { host: string; port: number };

/** The admin listener's address, or undefined when it is off. */
export function adminListener(flag: string | undefined, publicPort: number, env: NodeJS.ProcessEnv = process.env): AdminListen | undefined {
  if (flag === 'off') return undefined;
  if (flag === undefined || flag === 'unix') return { path: defaultAdminSocket(publicPort, env) };
  if (flag.startsWith('unix:')) return { path: flag.slice('unix:'.length) };
  const colon = flag.lastIndexOf(':');
  const host = flag.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
  const port = Number(flag.slice(colon + 1));
  if (port > 65535) throw new Error(`--admin-addr: port ${port} is out of range`);
  return { host, port };
}

/**
 * `<run dir>/router-<port>.sock`: one socket per public port, so several routers on a host do
 * not collide (a router that asked the OS for its port is named by its pid). The run dir is
 * $XDG_RUNTIME_DIR/llmgw (the user's own, 0700 by systemd), else ~/.llmgw/run.
 */
export function defaultAdminSocket(publicPort: number, env: NodeJS.ProcessEnv = process.env): string {
  const runDir = env.XDG_RUNTIME_DIR ? join(env.XDG_RUNTIME_DIR, 'llmgw') : join(homedir() || tmpdir(), '.llmgw', 'run');
  return join(runDir, publicPort === 0 ? `router-pid-${process.pid}.sock` : `router-${publicPort}.sock`);
}

/** How the admin listener is written where an operator reads it: `unix:PATH` or `http://HOST:PORT`. */
export function adminUrl(admin: AdminListen, port: number | undefined): string {
  if ('path' in admin) return `unix:${admin.path}`;
  const host = admin.host.includes(':') ? `[${admin.host}]` : admin.host;
  return `http://${host}:${port ?? admin.port}`;
}

/** The log line that says where the admin listener is, or that it is off. */
export function describeAdmin(publicHost: string, port: number | undefined, admin: AdminListen | undefined): string {
  if (admin === undefined) return 'router: admin listener off (no /metrics, no detailed /health)';
  // Engine URLs and route-source errors are for operators: say so when others can reach them.
  const exposed =
    'path' in admin ? '; socket mode 0600' : LOOPBACK.test(admin.host) ? '' : '; not loopback: anyone who can reach it sees engine URLs';
  return `router: /metrics and detailed /health on ${adminUrl(admin, port)} (the public ${publicHost} answers /health with the status only${exposed})`;
}

const LOOPBACK = /^(localhost|::1|127\.\d{1,3}\.\d{1,3}\.\d{1,3})$/;
