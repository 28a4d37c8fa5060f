// The one check every listing of a model's files passes before llmgw writes anything for it: the
// hub's tree, an S3 prefix (current or rebuilt from a versioned bucket's history), a manifest
// read back from the cache, and the GGUF files of a file:// folder. A listing names files the
// store's owner chose; the agent writes and links them as root, so a name that climbs out of the
// cache (`..`, an absolute path, a link that points out) is refused whole. Shared by the agent
// (fetches, file pins) and the control worker (pins at deploy).
import { existsSync, lstatSync, realpathSync } from 'node:fs';
import { dirname, isAbsolute, relative, resolve } from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from './failures.js';

/** One listed file: its path inside the revision and, for a fetched store, the digest its blob is named by. */
export interface ListedEntry {
  path: string;
  etag?: string;
}

/** Where a fetched revision's files go: the cache, its snapshot folder (links) and the repository's blobs folder. */
export interface ListingDirs {
  cache: string;
  snapshot: string;
  blobs: string;
}

/** Why `path` cannot be a file of a revision, or undefined when it can. Pure. */
export function listingPathProblem(path: string): string | undefined {
  if (path === '') return 'is empty';
  // NUL ends a path in the kernel's eyes; other control characters have no place in a model's files.
  if ([...path].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f)) return 'holds a NUL or another control character';
  if (path.includes('\\')) return 'holds a backslash';
  if (path.startsWith('/')) return 'is absolute';
  const segments = path.split('/');
  if (segments.includes('..')) return 'has a ".." segment';
  if (segments.includes('.')) return 'has a "." segment';
  if (segments.includes('')) return 'has an empty segment (a doubled or trailing "/")';
  return undefined;
}

/** Why `etag` cannot name a blob, or undefined: a digest is one plain name, never a path. */
export function blobNameProblem(etag: string): string | undefined {
  return /^[A-Za-z0-9][A-Za-z0-9_-]*$/.test(etag) ? undefined : 'is not a plain digest (a blob is named by it)';
}

/** Whether `path`, resolved, is `dir` itself or under it. */
export function isInside(dir: string, path: string): boolean {
  const rel = relative(resolve(dir), resolve(dir, path));
  return rel === '' || (rel !== '..' && !rel.startsWith('../') && !isAbsolute(rel));
}

function refusal(what: string, entry: string, problem: string, fix: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(
    `${what}: its listing holds ${JSON.stringify(entry)}, which ${problem}; llmgw writes nothing for a listing that names a file outside the revision's folder. ${fix}`,
    FailureType.WeightsUnavailable,
  );
}

/**
 * Throws a non-retryable WeightsUnavailable failure naming the first bad entry and `fix` (what
 * the operator does about it), or returns. With `dirs`, each path must also resolve inside the
 * snapshot and each blob inside the blobs folder, and no path may be both a file and a folder
 * (the link of one would be the parent of the other).
 */
export function checkListing(what: string, entries: readonly ListedEntry[], fix: string, dirs?: ListingDirs): void {
  const seen = new Set<string>();
  for (const entry of entries) {
    const problem =
      listingPathProblem(entry.path) ??
      (entry.etag !== undefined ? blobNameProblem(entry.etag) : undefined) ??
      (seen.has(entry.path) ? 'is listed twice' : undefined) ??
      (dirs && !isInside(dirs.snapshot, entry.path) ? `resolves outside ${dirs.snapshot}` : undefined) ??
      (dirs && entry.etag !== undefined && !isInside(dirs.blobs, entry.etag) ? `has a blob outside ${dirs.blobs}` : undefined);
    if (problem) throw refusal(what, entry.path, problem, fix);
    seen.add(entry.path);
  }
  for (const path of seen) {
    for (let parent = dirname(path); parent !== '.'; parent = dirname(parent)) {
      if (seen.has(parent)) throw refusal(what, path, `sits under ${JSON.stringify(parent)}, which is listed as a file`, fix);
    }
  }
}

/**
 * The snapshot and blobs folders, where they exist, must resolve inside the cache: a link planted
 * in their place would take every write and link of the fetch out of it.
 */
export function checkCacheFolders(what: string, dirs: ListingDirs): void {
  const cache = realpathSync(dirs.cache);
  for (const dir of [dirs.blobs, dirs.snapshot]) {
    // The nearest folder that exists: a missing one is made through it.
    let existing = dir;
    while (!existsSync(existing) && dirname(existing) !== existing) existing = dirname(existing);
    const real = realpathSync(existing);
    if (!isInside(cache, real)) {
      throw refusal(
        what,
        relative(dirs.cache, existing),
        `is a folder of the cache that links out to ${real}`,
        `remove ${existing} (a link) and fetch again`,
      );
    }
  }
}

/**
 * A link about to be made at `link` (inside `snapshot`) to `blob`: refused when a folder on its
 * way is a link that leads out of the snapshot (one planted in the cache), or when its target
 * resolves anywhere but `blob` inside `blobs`. Call after its parent folder exists.
 */
export function checkCacheLink(what: string, dirs: ListingDirs, link: string, target: string, blob: string): void {
  const fix = `remove ${dirs.snapshot} and fetch again (llmgw weights remove, then deploy or prefetch)`;
  const parent = realpathSync(dirname(link));
  const snapshot = realpathSync(dirs.snapshot);
  if (!isInside(snapshot, parent)) throw refusal(what, relative(dirs.snapshot, link), `lies in a folder that links out to ${parent}`, fix);
  const resolved = resolve(dirname(link), target);
  if (resolved !== resolve(blob) || !isInside(dirs.blobs, resolved)) {
    throw refusal(what, relative(dirs.snapshot, link), `would link to ${resolved}, not to its blob in ${dirs.blobs}`, fix);
  }
}

/**
 * The files of a file:// folder, each a plain name in it; a link among them must lead to a file
 * inside the folder (as the folder itself resolves), since the agent reads them as root.
 */
export function checkFolderFiles(what: string, folder: string, files: readonly string[]): void {
  const fix = `make ${folder} hold the model's files themselves (or links within it), then deploy again`;
  const real = realpathSync(folder);
  for (const file of files) {
    const name = relative(folder, file);
    const problem = listingPathProblem(name) ?? (name.includes('/') ? 'is not directly in the folder' : undefined);
    if (problem) throw refusal(what, name, problem, fix);
    if (lstatSync(file).isSymbolicLink()) {
      const to = realpathSync(file);
      if (!isInside(real, to)) throw refusal(what, name, `is a link that leads out of the folder, to ${to}`, fix);
    }
  }
}
