// Where `llmgw router` serves its admin listener (/metrics, detailed /health): --admin-addr
// HOST:PORT or `off`, by default loopback on the port after the public one, so that a router on
// 8080 has its admin on 127.0.0.1:8081 and several routers on one host do not collide. Router side.
import { z } from 'zod';

/** `off`, or HOST:PORT (an IPv6 host in brackets). */
export const AdminAddr = z.union([
  z.literal('off'),
  z.string().regex(/^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]+):\d{1,5}$/, { error: 'must be HOST:PORT or off' }),
]);

/** The admin listener's address, or undefined when it is off. */
export function adminListener(flag: string | undefined, publicPort: number): { host: string; port: number } | undefined {
  if (flag === 'off') return undefined;
  if (flag === undefined) {
    // A router that asked the OS for its port asks for its admin port too.
    return { host: '127.0.0.1', port: publicPort === 0 || publicPort === 65535 ? 0 : publicPort + 1 };
  }
  const colon = flag.lastIndexOf(':');
  const host = flag.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
  const port = Number(flag.slice(colon + 1));
  if (port > 65535) throw new Error(`--admin-addr: port ${port} is out of range`);
  return { host, port };
}

/** The log line that says where the admin listener is, or that it is off. */
export function describeAdmin(publicHost: string, port: number | undefined, admin: { host: string } | undefined): string {
  if (admin === undefined || port === undefined) return 'router: admin listener off (no /metrics, no detailed /health)';
  const host = admin.host.includes(':') ? `[${admin.host}]` : admin.host;
  // Engine URLs and route-source errors are for operators: say so when others can reach them.
  const exposed = LOOPBACK.test(admin.host) ? '' : '; not loopback: anyone who can reach it sees engine URLs';
  return `router: /metrics and detailed /health on http://${host}:${port} (the public ${publicHost} answers /health with the status only${exposed})`;
}

const LOOPBACK = /^(localhost|::1|127\.\d{1,3}\.\d{1,3}\.\d{1,3})$/;
