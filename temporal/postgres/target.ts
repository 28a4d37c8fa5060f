// Where Temporal's databases live: a PostgreSQL named by LLMGW_POSTGRES_URL, or llmgw's
// private cluster. Parses and checks the URL (a user's input), and probes the server with
// a bounded wait, so that a wrong URL is an error that says what to do, never a hang.
import { connect } from 'node:net';
import { z } from 'zod';

export interface PostgresTarget {
  host: string;
  port: number;
  user: string;
  password: string;
  /** Temporal's main database; visibility lives in `<database>_visibility`. */
  database: string;
  tls: { enabled: false } | { enabled: true; verifyHost: boolean; caFile?: string };
  /** Where it came from, for messages: "LLMGW_POSTGRES_URL (postgres://temporal:***@db:5432/temporal)". */
  source: string;
}

export const URL_ENV = 'LLMGW_POSTGRES_URL';

const Identifier = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,40}$/, 'a database name of letters, digits and underscores');
const UrlParts = z.object({
  protocol: z.enum(['postgres:', 'postgresql:'], { error: 'the scheme must be postgres:// or postgresql://' }),
  hostname: z.string().min(1, 'a host is needed: postgres://USER:PASSWORD@HOST:5432/temporal'),
  port: z.coerce.number().int().min(1).max(65535),
  username: z.string().min(1, 'a user is needed: postgres://USER:PASSWORD@HOST:5432/temporal'),
  database: Identifier,
  sslmode: z.enum(['disable', 'require', 'verify-ca', 'verify-full'], {
    error: 'sslmode must be disable, require, verify-ca or verify-full',
  }),
});

/** A URL with its password hidden, for logs and messages. */
export function redactUrl(raw: string): string {
  return raw.replace(/(\/\/[^:/@]*:)[^@]*@/, '$1***@');
}

export function parsePostgresUrl(raw: string, origin = URL_ENV): PostgresTarget {
  const shown = `${origin}=${redactUrl(raw)}`;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`${shown} is not a URL; expected postgres://USER:PASSWORD@HOST:5432/temporal`);
  }
  const known = new Set(['sslmode', 'sslrootcert']);
  const unknown = [...url.searchParams.keys()].filter((key) => !known.has(key));
  if (unknown.length)
    throw new Error(`${shown}: llmgw does not understand the parameter(s) ${unknown.join(', ')} (it knows sslmode and sslrootcert)`);
  const parsed = UrlParts.safeParse({
    protocol: url.protocol,
    hostname: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: url.port || '5432',
    username: decodeURIComponent(url.username),
    database: decodeURIComponent(url.pathname.replace(/^\//, '')) || 'temporal',
    sslmode: url.searchParams.get('sslmode') ?? 'disable',
  });
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ');
    throw new Error(`${shown} is not usable: ${problems}`);
  }
  const { hostname, port, username, database, sslmode } = parsed.data;
  const caFile = url.searchParams.get('sslrootcert') ?? undefined;
  return {
    host: hostname,
    port,
    user: username,
    password: decodeURIComponent(url.password),
    database,
    tls: sslmode === 'disable' ? { enabled: false } : { enabled: true, verifyHost: sslmode === 'verify-full', caFile },
    source: shown,
  };
}

export function visibilityDatabase(target: PostgresTarget): string {
  return `${target.database}_visibility`;
}

/** Resolves to undefined when a TCP connection opens within the time, or to why it did not. */
export function probeTcp(host: string, port: number, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (problem: string | undefined): void => {
      socket.destroy();
      resolve(problem);
    };
    socket.setTimeout(timeoutMs, () => done(`no answer within ${timeoutMs} ms`));
    socket.once('connect', () => done(undefined));
    socket.once('error', (error: NodeJS.ErrnoException) => done(error.code ?? error.message));
  });
}
