// The router's connections to engines: one undici Pool per replica endpoint, kept alive a
// little less than the engines keep idle connections (uvicorn closes them after 5 s), with a
// connect timeout and an idle timeout (silence, not length: a long generation that keeps sending
// is never cut). Also names the ways talking to an engine fails. Router side.
import { Pool } from 'undici';
import { engineKeyFor, keyChainOf } from '../../common/engine-keys.js';
import { pinnedConnector } from '../../common/engine-tls.js';

export interface UpstreamOptions {
  /** How long a connection attempt may take before the request goes to another replica. */
  connectTimeoutMs: number;
  /** Idle keep-alive; below the engines' own 5 s so that we, not they, close idle sockets. */
  keepAliveMs: number;
  /**
   * How long an engine may send nothing, while the router waits for its answer's headers or
   * between two pieces of its body, before the request fails (a hung engine, a half-open
   * connection). A stream sends a chunk per token; a non-streaming answer is silent until it is
   * whole, so the default leaves a long non-streaming generation (thousands of tokens at tens a
   * second) room to finish. 0: no limit.
   */
  idleTimeoutMs: number;
  /**
   * The fleet's engine key (--engine-key-file); undefined when engines require none. Each engine
   * is sent its replica run's key derived from it (EngineAuths below).
   */
  engineKey?: string | undefined;
}

/** Ten minutes of silence: no healthy engine is that quiet while it serves a request. */
export const DEFAULT_IDLE_TIMEOUT_MS = 600_000;

export const DEFAULT_UPSTREAM: UpstreamOptions = { connectTimeoutMs: 3000, keepAliveMs: 4000, idleTimeoutMs: DEFAULT_IDLE_TIMEOUT_MS };

/**
 * `tlsPin`: the engine serves HTTPS (its signed route's pin): every connection is TLS, and is
 * used only once the engine has shown that very certificate (common/engine-tls.ts).
 */
export function createUpstreamPool(url: string, options: UpstreamOptions, tlsPin?: string): Pool {
  const connect = { timeout: options.connectTimeoutMs, noDelay: true };
  return new Pool(url, {
    // No cap: a request queued inside the router is hidden from the engine's scheduler and its
    // metrics; the engine's own queue is the one that should hold it.
    connections: null,
    pipelining: 1,
    connect: tlsPin === undefined ? connect : pinnedConnector(tlsPin, connect),
    keepAliveTimeout: options.keepAliveMs,
    keepAliveMaxTimeout: options.keepAliveMs,
    headersTimeout: options.idleTimeoutMs,
    bodyTimeout: options.idleTimeoutMs,
  });
}

export type UpstreamFailure =
  'connect_refused' | 'connect_timeout' | 'connection_reset' | 'idle_timeout' | 'status_503' | 'mid_stream' | 'endpoint_closed' | 'other';

/** The reason label for an error undici reported before any response byte. */
export function classifyUpstreamError(err: unknown): UpstreamFailure {
  const code = typeof err === 'object' && err !== null ? (err as { code?: unknown }).code : undefined;
  switch (code) {
    // Another certificate than the signed route's: not this replica's engine, so try another.
    case 'LLMGW_TLS_PIN_MISMATCH':
    case 'ECONNREFUSED':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'connect_refused';
    case 'UND_ERR_CONNECT_TIMEOUT':
    case 'ETIMEDOUT':
      return 'connect_timeout';
    case 'ECONNRESET':
    case 'EPIPE':
    case 'UND_ERR_SOCKET':
      return 'connection_reset';
    case 'UND_ERR_HEADERS_TIMEOUT':
    case 'UND_ERR_BODY_TIMEOUT':
      return 'idle_timeout';
    case 'UND_ERR_CLOSED':
    case 'UND_ERR_DESTROYED':
      return 'endpoint_closed';
    default:
      return 'other';
  }
}

/** Headers the router sends engines: the client's own (its API key above all) stay with the router. */
export const UPSTREAM_HEADERS: string[] = ['content-type', 'application/json'];

/**
 * How the router proves itself to one engine: the headers every call of its there carries, in
 * the two shapes undici takes. vLLM guards only /v1/* with its key, but sending it everywhere
 * (metrics, health, adapter loads) leaves no call to forget when an engine guards more.
 */
export interface EngineAuth {
  /** For a proxied request (Exchange's dispatch): UPSTREAM_HEADERS and the key. */
  readonly proxy: string[];
  /** For the router's own calls (scrapes, adapter reads and loads, health checks). */
  readonly own: Readonly<Record<string, string>>;
}

export const NO_ENGINE_KEY: EngineAuth = { proxy: UPSTREAM_HEADERS, own: {} };

/** The headers for engines that require `engineKey`; none when undefined. */
export function engineAuth(engineKey: string | undefined): EngineAuth {
  if (engineKey === undefined) return NO_ENGINE_KEY;
  const authorization = `Bearer ${engineKey}`;
  return { proxy: [...UPSTREAM_HEADERS, 'authorization', authorization], own: { authorization } };
}

/**
 * Each endpoint's headers, by the key chain its signed route names: the key of that replica run
 * (common/engine-keys.ts), derived once per chain and kept while a route names it; the fleet key
 * (--engine-key-file) only for a route that names no chain. The same object for the same chain,
 * so an endpoint whose route moved to another chain is told by identity.
 */
export class EngineAuths {
  private readonly byChain = new Map<string, EngineAuth>();
  private readonly fleet: EngineAuth;

  constructor(private readonly fleetKey: string | undefined) {
    this.fleet = engineAuth(fleetKey);
  }

  for(named: { chain?: string | undefined; keyChain?: string | undefined }): EngineAuth {
    const chain = keyChainOf(named);
    if (this.fleetKey === undefined || chain === undefined) return this.fleet;
    let auth = this.byChain.get(chain);
    if (!auth) {
      auth = engineAuth(engineKeyFor(this.fleetKey, chain));
      this.byChain.set(chain, auth);
    }
    return auth;
  }

  /** Forgets the chains no route names any more (`keep`: the key chains of the table). */
  keepOnly(keep: ReadonlySet<string>): void {
    for (const chain of this.byChain.keys()) if (!keep.has(chain)) this.byChain.delete(chain);
  }
}

/** The headers of an engine's answer that the router passes on, read from undici's raw list. */
export function passedHeaders(headers: Buffer[]): { type: string; contentLength: string | undefined; encoding: string | undefined } {
  let type = 'application/json';
  let contentLength: string | undefined;
  let encoding: string | undefined;
  for (let i = 0; i + 1 < headers.length; i += 2) {
    switch (headerName(headers[i] as Buffer)) {
      case 'content-type':
        type = (headers[i + 1] as Buffer).toString('latin1');
        break;
      case 'content-length':
        contentLength = (headers[i + 1] as Buffer).toString('latin1');
        break;
      case 'content-encoding':
        encoding = (headers[i + 1] as Buffer).toString('latin1');
        break;
      case undefined:
        break;
    }
  }
  return { type, contentLength, encoding };
}

type PassedHeader = 'content-type' | 'content-length' | 'content-encoding';

/** Which of the headers the router passes on `name` is (any case), without making a string of it. */
function headerName(name: Buffer): PassedHeader | undefined {
  let wanted: PassedHeader;
  switch (name.length) {
    case 12:
      wanted = 'content-type';
      break;
    case 14:
      wanted = 'content-length';
      break;
    case 16:
      wanted = 'content-encoding';
      break;
    default:
      return undefined;
  }
  // ASCII letters and '-': setting bit 0x20 lowercases letters and leaves '-' as it is.
  for (let i = 0; i < wanted.length; i++) if (((name[i] as number) | 0x20) !== wanted.charCodeAt(i)) return undefined;
  return wanted;
}
