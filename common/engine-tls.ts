// TLS to engines by pin: an engine started with --engine-tls presents a self-signed certificate
// its agent issued (common/self-signed-cert.ts), and whoever calls it (the agent's health checks,
// the router's requests, scrapes, probes and adapter calls) accepts exactly the certificate whose
// SHA-256 fingerprint the signed route (or the agent's own shard record) names. No CA bundle and
// no trust on first use: a certificate is not checked against any authority, only compared.
// Both sides (agent and router).
import { createHash } from 'node:crypto';
import type { TLSSocket } from 'node:tls';
import { Agent, buildConnector } from 'undici';

/** A pin: SHA-256 of the certificate's DER, 64 lowercase hex digits. */
export const TLS_PIN = /^[0-9a-f]{64}$/;

export function isTlsPin(value: unknown): value is string {
  return typeof value === 'string' && TLS_PIN.test(value);
}

/** The error a connection to a certificate other than the pinned one fails with. */
export class TlsPinMismatch extends Error {
  override name = 'TlsPinMismatch';
  readonly code = 'LLMGW_TLS_PIN_MISMATCH';
}

/** The pin of the certificate `socket`'s peer presented, or undefined when it presented none. */
export function peerPin(socket: TLSSocket): string | undefined {
  const cert = socket.getPeerX509Certificate();
  return cert ? createHash('sha256').update(cert.raw).digest('hex') : undefined;
}

/**
 * An undici connector that speaks TLS and hands undici the socket only once the peer's
 * certificate is the pinned one: nothing (a key, a prompt) is written before the comparison.
 * Chain validation is off because there is no chain: the pin is the whole check, and a TLS
 * handshake proves the peer holds the pinned certificate's private key. Sessions are not
 * resumed, so every connection shows its certificate.
 */
export function pinnedConnector(pin: string, options: { timeout?: number; noDelay?: boolean } = {}): buildConnector.connector {
  if (!isTlsPin(pin)) throw new Error(`not a TLS pin (SHA-256, 64 hex digits): ${JSON.stringify(pin)}`);
  const connect = buildConnector({ ...options, rejectUnauthorized: false, maxCachedSessions: 0 });
  return (target, callback) => {
    if (target.protocol !== 'https:') {
      callback(new TlsPinMismatch(`a pinned engine is reached over https, not ${target.protocol}`), null);
      return;
    }
    connect(target, (error, socket) => {
      if (error !== null) return callback(error, null);
      const seen = peerPin(socket as TLSSocket);
      if (seen === pin) return callback(null, socket);
      socket.destroy();
      callback(
        new TlsPinMismatch(`${target.hostname}:${target.port} presented certificate ${seen ?? '(none)'}, not the pinned ${pin}`),
        null,
      );
    });
  };
}

/** Dispatchers by pin, for calls that have no pool of their own (probes); the oldest closed past this many. */
const KEPT_DISPATCHERS = 256;
const dispatchers = new Map<string, Agent>();

/** A keep-alive undici Agent that reaches only engines presenting `pin`'s certificate. */
export function pinnedDispatcher(pin: string): Agent {
  let agent = dispatchers.get(pin);
  if (agent) {
    // Most recently used last: the map's order is its eviction order.
    dispatchers.delete(pin);
    dispatchers.set(pin, agent);
    return agent;
  }
  agent = new Agent({ connect: pinnedConnector(pin), connections: 2, keepAliveTimeout: 4000, keepAliveMaxTimeout: 4000 });
  dispatchers.set(pin, agent);
  for (const [old, oldest] of dispatchers) {
    if (dispatchers.size <= KEPT_DISPATCHERS) break;
    dispatchers.delete(old);
    void oldest.close().catch(() => undefined);
  }
  return agent;
}

/** The https URL of an http one (same host and port): how a route with a pin is reached. */
export function httpsOf(endpoint: string): string {
  return endpoint.replace(/^http:\/\//, 'https://');
}
