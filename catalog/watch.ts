// The control worker's live view of the catalog file: edits are picked up without a
// restart, and a broken edit never replaces the last catalog that was valid.
import { statSync } from 'node:fs';
import { formatCatalogErrors, loadCatalogFile } from './load.js';
import type { Catalog } from './schema.js';

export interface CatalogSource {
  /** The current catalog: the file as it is now if it is valid, else the last valid version. */
  get(): Catalog;
  /** Stops looking at the file; get() keeps returning the last valid catalog. */
  close(): void;
}

export interface CatalogSourceOptions {
  /** Where a rejected edit is reported; console.error by default. */
  log?: (message: string) => void;
}

/**
 * Loads `path` now (throwing with every error if it is not a valid catalog: there is no
 * good version to fall back on yet) and re-reads it on get() whenever the file changed.
 *
 * Checking on get() rather than with a watcher means no timers to leak and no missed
 * events on editors that replace the file by rename; a stat per lookup is cheap.
 */
export function createCatalogSource(path: string, options: CatalogSourceOptions = {}): CatalogSource {
  const log = options.log ?? ((message: string) => console.error(message));

  const first = loadCatalogFile(path);
  if (!first.ok) throw new Error(`invalid catalog ${path}:\n${formatCatalogErrors(first.errors, path)}`);
  let current: Catalog = first.catalog;
  // The version last looked at, good or bad, so that a bad edit is reported once, not on every get().
  let seen = stampOf(path);
  let closed = false;

  return {
    get(): Catalog {
      if (closed) return current;
      const stamp = stampOf(path);
      if (stamp === seen) return current;
      seen = stamp;
      const result = loadCatalogFile(path);
      if (result.ok) {
        current = result.catalog;
      } else {
        log(`catalog ${path} changed but is invalid; still using the last valid version:\n${formatCatalogErrors(result.errors, path)}`);
      }
      return current;
    },
    close(): void {
      closed = true;
    },
  };
}

// Size and inode alongside the mtime catch two writes within one timestamp tick and a
// file replaced by rename with a preserved mtime. Also the catalog key file's (workers/key-file-watch.ts).
export function stampOf(path: string): string {
  try {
    const stat = statSync(path);
    return `${stat.mtimeMs}:${stat.ctimeMs}:${stat.size}:${stat.ino}`;
  } catch {
    return 'missing';
  }
}
