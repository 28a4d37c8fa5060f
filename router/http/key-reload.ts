// Reading the API keys again without a restart: the keys file is watched (a stat every 2 s, which
// also sees a mounted secret's link swapped under it) and read on SIGHUP. A file that no longer
// parses, or holds no key, leaves the keys in use as they were and says why; nothing logged names
// a key (the parser's errors name lines, never their text). Router side; each router process of
// a --workers cluster watches for itself (main.ts forwards SIGHUP to them).
import { unwatchFile, watchFile, type Stats } from 'node:fs';
import type { ApiKeys } from './auth.js';

export interface KeyReloadOptions {
  file: string;
  /** Reads the keys file and LLMGW_API_KEYS again (flags.ts); throws naming the line. */
  read: () => ApiKeys | undefined;
  /** Serves the keys from now on; says what changed (RouterCore.replaceApiKeys). */
  apply: (keys: ApiKeys) => string;
  log: (line: string) => void;
  intervalMs?: number;
}

export interface KeyReloader {
  /** Reads the file now; `why` goes in the log line. Never throws. */
  reload(why: string): void;
  stop(): void;
}

export function watchApiKeys(options: KeyReloadOptions): KeyReloader {
  const { file, log } = options;
  const reload = (why: string): void => {
    let keys: ApiKeys | undefined;
    try {
      keys = options.read();
    } catch (err) {
      log(`router: API keys not reloaded (${why}): ${(err as Error).message}; the keys read before still apply`);
      return;
    }
    // loadApiKeys refuses a file with no key; keys only from the environment would mean none from the file.
    if (keys === undefined) {
      log(`router: API keys not reloaded (${why}): ${file} and LLMGW_API_KEYS hold no key; the keys read before still apply`);
      return;
    }
    log(`router: API keys reloaded from ${file} (${why}): ${options.apply(keys)}`);
  };
  const onChange = (now: Stats, before: Stats): void => {
    if (now.mtimeMs === before.mtimeMs && now.ino === before.ino && now.size === before.size) return;
    // A file being replaced may be missing for a moment: the next change reads it.
    if (now.nlink === 0 && now.size === 0 && now.mtimeMs === 0) return;
    reload(`${file} changed`);
  };
  watchFile(file, { interval: options.intervalMs ?? 2000, persistent: false }, onChange);
  return { reload, stop: () => unwatchFile(file, onChange) };
}
