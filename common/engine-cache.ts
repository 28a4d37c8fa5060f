// Where llmgw keeps what engines read (the llama-server binary, models assembled from packages):
// ~/.cache/llmgw, except for root, whose home the unprivileged engine user cannot enter, where
// it is /var/cache/llmgw (0755). LLMGW_ENGINE_CACHE overrides both.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { llmgwCacheDir } from '../temporal/go-install.js';

export function engineCacheDir(name: string): string {
  const explicit = process.env.LLMGW_ENGINE_CACHE;
  if (explicit) return join(explicit, name);
  if (process.getuid?.() === 0 && !process.env.XDG_CACHE_HOME) return join('/var/cache/llmgw', name);
  return llmgwCacheDir(name);
}

/** Makes the folder (and the cache root) readable and enterable by every user: engines run as another. */
export function makeEngineCacheDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o755 });
}

/** Where catalogs' `${LLMGW_MODELS}` points: LLMGW_MODELS, else the engine cache's models folder. */
export function modelsDir(): string {
  return process.env.LLMGW_MODELS || engineCacheDir('models');
}
