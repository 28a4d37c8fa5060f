// API keys for the router's OpenAI endpoints: read from a file and/or LLMGW_API_KEYS, checked
// against the request's `Authorization: Bearer …` in constant time. Router side.
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';

export class ApiKeys {
  // Digests, so that every comparison is between equal-length buffers: timingSafeEqual needs that,
  // and comparing raw keys of different lengths would leak the length.
  private readonly digests: Buffer[];

  constructor(keys: readonly string[]) {
    if (keys.length === 0) throw new Error('ApiKeys needs at least one key');
    this.digests = keys.map(digest);
  }

  get size(): number {
    return this.digests.length;
  }

  /** True when the Authorization header carries one of the keys. */
  check(authorization: string | undefined): boolean {
    if (authorization === undefined || authorization.length < 8) return false;
    if (authorization.slice(0, 7).toLowerCase() !== 'bearer ') return false;
    const presented = digest(authorization.slice(7).trim());
    // Every key is compared, so the time taken does not say which one matched.
    let ok = false;
    for (const d of this.digests) ok = timingSafeEqual(d, presented) || ok;
    return ok;
  }
}

function digest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

/** Keys from a file (one per line; blank lines and `#` comments skipped). */
export function readKeysFile(path: string): string[] {
  return parseKeys(readFileSync(path, 'utf8').split('\n'));
}

/** Keys from LLMGW_API_KEYS: comma- or newline-separated. */
export function keysFromEnv(env: NodeJS.ProcessEnv = process.env): string[] {
  const raw = env.LLMGW_API_KEYS;
  return raw ? parseKeys(raw.split(/[,\n]/)) : [];
}

function parseKeys(lines: string[]): string[] {
  return lines.map((line) => line.trim()).filter((line) => line !== '' && !line.startsWith('#'));
}

/** The configured keys from both places, or undefined when none are configured (no auth). */
export function loadApiKeys(options: { file?: string | undefined; env?: NodeJS.ProcessEnv }): ApiKeys | undefined {
  const fromFile = options.file ? readKeysFile(options.file) : [];
  // A keys file that holds no key is a mistake, not a wish to run open.
  if (options.file && fromFile.length === 0) throw new Error(`API keys file ${options.file} holds no key`);
  const keys = [...fromFile, ...keysFromEnv(options.env)];
  return keys.length > 0 ? new ApiKeys(keys) : undefined;
}
