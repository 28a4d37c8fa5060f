// Whether an engine's host still answers a fresh TCP connection: what tells a partitioned engine
// (packets dropped, no reset) from a busy one when a scrape times out. Router side; the scraper
// asks it.
import { connect } from 'node:net';

/**
 * How long a fresh connection may take to open. The engine's kernel, not the engine, answers a
 * SYN, so even an engine too busy to serve its metrics page connects in well under a millisecond
 * on a LAN; a second is a lost SYN's first retransmission, and more than any healthy link needs.
 */
export const REACH_TIMEOUT_MS = 1000;

/** Where a TCP connection to an endpoint's URL goes (TLS endpoints too: the TCP connect is enough). */
export function tcpAddress(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  // An IPv6 literal keeps its brackets in `hostname`; net.connect wants the address alone.
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = parsed.port === '' ? (parsed.protocol === 'https:' ? 443 : 80) : Number(parsed.port);
  return { host, port };
}

/** Errors that say the engine's host cannot be reached; others (out of descriptors or local ports) say nothing of it. */
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT']);

/**
 * True when a fresh TCP connection to `url`'s host and port opens within `timeoutMs`, or fails
 * for a reason of this router's own (no descriptors or ports left: no evidence against the
 * engine); false when it is refused, unroutable or times out. Sends nothing and closes at once:
 * an engine learns nothing from it but a connection opened and closed.
 */
export function reachable(url: string, timeoutMs: number = REACH_TIMEOUT_MS): Promise<boolean> {
  const { host, port } = tcpAddress(url);
  return new Promise((resolve) => {
    const socket = connect({ host, port, noDelay: true });
    // Never what keeps a stopping router alive.
    socket.unref();
    let answered = false;
    const done = (ok: boolean): void => {
      if (answered) return;
      answered = true;
      clearTimeout(timer);
      socket.removeAllListeners();
      // An error after the answer (a reset as it closes) must not be an uncaught one.
      socket.on('error', () => {});
      socket.destroy();
      resolve(ok);
    };
    // After the poll phase: a connect that opened while this router's own event loop was stalled
    // for longer than the timeout is seen first, rather than judged a partition.
    const timer = setTimeout(() => setImmediate(() => done(false)), timeoutMs);
    timer.unref();
    socket.once('connect', () => done(true));
    socket.once('error', (err: NodeJS.ErrnoException) => done(!UNREACHABLE_CODES.has(err.code ?? '')));
  });
}
