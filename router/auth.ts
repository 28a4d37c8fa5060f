// API keys for the router's OpenAI endpoints: read from a file and/or LLMGW_API_KEYS, checked
// against the request's `Authorization: Bearer …` in constant time, each with its own limits
// (requests per second, concurrent requests) and a label for metrics that is a prefix of the
// key's digest, never the key. Router side.
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';

/** A key's limits; undefined means unlimited. */
export interface KeyLimits {
  /** Requests per second, with a burst of one second's worth. */
  rps: number | undefined;
  /** Requests in flight at once. */
  concurrent: number | undefined;
}

export const UNLIMITED: KeyLimits = { rps: undefined, concurrent: undefined };

/** One key as the router knows it: never the key itself. */
export interface ApiKey {
  /** Position in the list: the router keeps each key's live state by it. */
  index: number;
  /** `sha256:` and the first 12 hex digits of the key's SHA-256: what metrics and logs show. */
  label: string;
  limits: KeyLimits;
}

export interface KeySpec {
  key: string;
  limits?: Partial<KeyLimits>;
}

export class ApiKeys {
  // Digests, so that every comparison is between equal-length buffers: timingSafeEqual needs that,
  // and comparing raw keys of different lengths would leak the length.
  private readonly digests: Buffer[];
  readonly keys: readonly ApiKey[];

  constructor(keys: ReadonlyArray<string | KeySpec>, defaults: KeyLimits = UNLIMITED) {
    if (keys.length === 0) throw new Error('ApiKeys needs at least one key');
    const specs = keys.map((k) => (typeof k === 'string' ? { key: k } : k));
    this.digests = specs.map((s) => digest(s.key));
    this.keys = specs.map((s, index) => ({
      index,
      label: keyLabel(this.digests[index] as Buffer),
      limits: { rps: s.limits?.rps ?? defaults.rps, concurrent: s.limits?.concurrent ?? defaults.concurrent },
    }));
  }

  get size(): number {
    return this.digests.length;
  }

  /** The key the Authorization header carries, or undefined. */
  check(authorization: string | undefined): ApiKey | undefined {
    if (authorization === undefined || authorization.length < 8) return undefined;
    if (authorization.slice(0, 7).toLowerCase() !== 'bearer ') return undefined;
    const presented = digest(authorization.slice(7).trim());
    // Every key is compared, so the time taken does not say which one matched.
    let found = -1;
    for (let i = 0; i < this.digests.length; i++) if (timingSafeEqual(this.digests[i] as Buffer, presented) && found < 0) found = i;
    return found < 0 ? undefined : this.keys[found];
  }
}

function digest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

function keyLabel(d: Buffer): string {
  return `sha256:${d.toString('hex').slice(0, 12)}`;
}

const Limit = z.object({
  rps: z.coerce.number({ error: 'rps must be a number' }).positive('rps must be > 0').optional(),
  concurrent: z.coerce
    .number({ error: 'concurrent must be an integer' })
    .int('concurrent must be an integer')
    .positive('concurrent must be > 0')
    .optional(),
});

/**
 * One line of a keys file: `KEY` or `KEY rps=N concurrent=N`. Throws naming what is wrong, but
 * never the key.
 */
export function parseKeyLine(line: string): KeySpec {
  const [key = '', ...options] = line.trim().split(/\s+/);
  const raw: Record<string, string> = {};
  for (const option of options) {
    const eq = option.indexOf('=');
    const name = option.slice(0, eq);
    if (eq <= 0 || (name !== 'rps' && name !== 'concurrent')) throw new Error(`unknown option "${option}" (rps=N, concurrent=N)`);
    raw[name] = option.slice(eq + 1);
  }
  const parsed = Limit.safeParse(raw);
  if (!parsed.success) throw new Error(parsed.error.issues.map((i) => i.message).join('; '));
  return { key, limits: parsed.data };
}

/** Keys from a file (one per line, with optional limits; blank lines and `#` comments skipped). */
export function readKeysFile(path: string): KeySpec[] {
  const lines = readFileSync(path, 'utf8').split('\n');
  const out: KeySpec[] = [];
  lines.forEach((line, i) => {
    const text = line.trim();
    if (text === '' || text.startsWith('#')) return;
    try {
      out.push(parseKeyLine(text));
    } catch (err) {
      throw new Error(`${path}:${i + 1}: ${(err as Error).message}`, { cause: err });
    }
  });
  return out;
}

/** Keys from LLMGW_API_KEYS: comma- or newline-separated, no options. */
export function keysFromEnv(env: NodeJS.ProcessEnv = process.env): string[] {
  const raw = env.LLMGW_API_KEYS;
  return raw
    ? raw
        .split(/[,\n]/)
        .map((k) => k.trim())
        .filter((k) => k !== '' && !k.startsWith('#'))
    : [];
}

/** The configured keys from both places, or undefined when none are configured (no auth). */
export function loadApiKeys(options: { file?: string | undefined; env?: NodeJS.ProcessEnv; defaults?: KeyLimits }): ApiKeys | undefined {
  const fromFile = options.file ? readKeysFile(options.file) : [];
  // A keys file that holds no key is a mistake, not a wish to run open.
  if (options.file && fromFile.length === 0) throw new Error(`API keys file ${options.file} holds no key`);
  const keys = [...fromFile, ...keysFromEnv(options.env)];
  return keys.length > 0 ? new ApiKeys(keys, options.defaults) : undefined;
}
