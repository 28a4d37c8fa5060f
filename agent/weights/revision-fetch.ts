// What every fetch of a pinned revision into the host cache does, whatever the store (the hub:
// fetch-revision.ts; S3: s3-fetch.ts): list its files once (kept in the manifest, so a cached
// revision needs no store at all), check what is on disk, make room, download what is missing
// or corrupt a few files at a time into `<blob>.incomplete`, verify each against the digest the
// store named, rename it into place and link the snapshot. Agent side.
import { promises as fs } from 'node:fs';
import { dirname, relative, resolve } from 'node:path';
import { checkCacheFolders, checkCacheLink, checkListing, type ListingDirs } from '../../common/listing-paths.js';
import { blobPath, blobsDir, incompletePath, snapshotDir } from './cache-layout.js';
import { writeManifest, type Manifest } from './manifest.js';
import type { FetchProgress } from './progress.js';

export type ManifestFile = Manifest['files'][number];
type Why = 'missing' | 'corrupt' | 'resumed';

export interface FetchRevisionResult {
  snapshotPath: string;
  bytesTotal: number;
  /** Bytes downloaded by this call (0: the revision was complete in the cache). */
  bytesFetched: number;
  /** Seconds from the first download's request to the last file in place (FetchProgress.transferSeconds). */
  transferSeconds: number;
  /** Files downloaded by this call, with the reason (missing, corrupt). */
  fetched: { path: string; why: Why }[];
}

/** What a fetch is given, whatever the store. */
export interface FetchCommon {
  weightsDir: string;
  progress: FetchProgress;
  signal: AbortSignal;
  /** Makes room for `bytes` more in the cache (eviction), or throws WeightsNoSpace. */
  reserve(bytes: number): Promise<void>;
  log(line: string): void;
  /** Files downloaded at once. */
  concurrency?: number;
}

/** One store's side of a fetch. */
export interface RevisionStore {
  /** What the store calls a file's digest, for log lines ("digest", "ETag"). */
  digestName: string;
  /** The revision's files, asked of the store on its first fetch only. */
  list(): Promise<ManifestFile[]>;
  /** The digest of a blob on disk, computed as the store computes `file.etag`. */
  digestOf(path: string, file: ManifestFile): Promise<string>;
  /** One file into `<blob>.incomplete`, resuming what is there, then into place (putInPlace); says whether it resumed. */
  download(manifest: Manifest, file: ManifestFile, signal: AbortSignal): Promise<boolean>;
}

export async function fetchFromStore(
  request: FetchCommon,
  revision: { repo: string; commit: string },
  listed: Manifest | undefined,
  store: RevisionStore,
): Promise<FetchRevisionResult> {
  const { weightsDir, progress } = request;
  const { repo, commit } = revision;
  const what = `${repo}@${commit.slice(0, 12)}`;
  const dirs = { cache: weightsDir, snapshot: snapshotDir(weightsDir, repo, commit), blobs: blobsDir(weightsDir, repo) };
  // Every store's listing, and a manifest an older agent wrote, is checked here, before the
  // first write: a name that leaves the snapshot is refused whole, not skipped.
  const fix = `the store's owner must rename or remove that file; until then no replica of this revision can start`;
  let manifest = listed;
  if (manifest) checkListing(what, manifest.files, fix, dirs);
  checkCacheFolders(what, dirs);
  if (!manifest) {
    const files = await store.list();
    checkListing(what, files, fix, dirs);
    manifest = { repo, commit, files, verified: {}, lastUsedAt: Date.now(), bytesTotal: files.reduce((sum, f) => sum + f.size, 0) };
    writeManifest(weightsDir, manifest);
  }
  manifest.lastUsedAt = Date.now();
  progress.begin(manifest.bytesTotal, manifest.files.length);

  // What is on disk and sound counts as done; the rest is fetched.
  const todo: { file: ManifestFile; why: Why }[] = [];
  for (const file of manifest.files) {
    const state = await checkBlob(weightsDir, manifest, file, store);
    // Two paths with the same content share a blob: it is fetched once (and never twice at once).
    if (state === 'ok' || todo.some((t) => t.file.etag === file.etag)) progress.fileDone(file.size);
    else todo.push({ file, why: state });
    if (state === 'corrupt')
      request.log(`weights ${repo}@${commit.slice(0, 12)}: ${file.path} does not match its ${store.digestName}; fetching it again`);
  }
  writeManifest(weightsDir, manifest);

  const remaining = todo.reduce((sum, t) => sum + t.file.size, 0);
  if (remaining > 0) await request.reserve(remaining);
  await eachAtOnce(request, todo, async (item, signal) => {
    const resumed = await store.download(manifest, item.file, signal);
    if (resumed && item.why === 'missing') item.why = 'resumed';
    writeManifest(weightsDir, manifest);
  });

  const dir = dirs.snapshot;
  checkCacheFolders(what, dirs);
  for (const file of manifest.files) await linkIntoSnapshot(weightsDir, repo, dirs, file, what);
  manifest.lastUsedAt = Date.now();
  writeManifest(weightsDir, manifest);
  return {
    snapshotPath: dir,
    bytesTotal: manifest.bytesTotal,
    bytesFetched: progress.bytesFetched(),
    transferSeconds: progress.transferSeconds(),
    fetched: todo.map((t) => ({ path: t.file.path, why: t.why })),
  };
}

/** Runs `work` over `items`, `concurrency` at once. The first failure stops the others, and this returns once none is writing. */
async function eachAtOnce<T>(request: FetchCommon, items: T[], work: (item: T, signal: AbortSignal) => Promise<void>): Promise<void> {
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(request.signal.reason);
  request.signal.addEventListener('abort', onAbort, { once: true });
  let failure: { error: unknown } | undefined;
  let next = 0;
  const worker = async (): Promise<void> => {
    try {
      while (next < items.length) {
        const item = items[next++]!;
        stop.signal.throwIfAborted();
        await work(item, stop.signal);
      }
    } catch (error) {
      failure ??= { error };
      stop.abort(error);
    }
  };
  await Promise.all(Array.from({ length: Math.min(request.concurrency ?? 4, items.length) }, worker));
  request.signal.removeEventListener('abort', onAbort);
  if (failure) throw failure.error;
}

/**
 * A blob is trusted without reading it again when its size and mtime are those recorded when
 * it was last verified; anything else (a write into it, a truncation) rehashes it.
 */
async function checkBlob(
  weightsDir: string,
  manifest: Manifest,
  file: ManifestFile,
  store: RevisionStore,
): Promise<'ok' | 'missing' | 'corrupt'> {
  const path = blobPath(weightsDir, manifest.repo, file.etag);
  const stat = await fs.stat(path).catch(() => undefined);
  if (!stat) return 'missing';
  const record = manifest.verified[file.etag];
  if (record && record.size === stat.size && record.mtimeMs === stat.mtimeMs) return 'ok';
  if (stat.size === file.size && (await store.digestOf(path, file)) === file.etag) {
    manifest.verified[file.etag] = { size: stat.size, mtimeMs: stat.mtimeMs };
    return 'ok';
  }
  delete manifest.verified[file.etag];
  await fs.rm(path, { force: true });
  return 'corrupt';
}

/** Where a file's download goes and how much of it an earlier try left (0 when more than the file). */
export async function partialOf(weightsDir: string, repo: string, file: ManifestFile): Promise<{ partial: string; offset: number }> {
  const partial = incompletePath(weightsDir, repo, file.etag);
  await fs.mkdir(dirname(partial), { recursive: true });
  const offset = (await fs.stat(partial).catch(() => undefined))?.size ?? 0;
  if (offset <= file.size) return { partial, offset };
  await fs.rm(partial, { force: true });
  return { partial, offset: 0 };
}

/**
 * A finished download into its blob, once its size and digest are the store's; otherwise the
 * partial file goes and the error says so (`label` names the file, `digestName` the digest).
 */
export async function putInPlace(
  request: Pick<FetchCommon, 'weightsDir' | 'progress'>,
  manifest: Manifest,
  file: ManifestFile,
  partial: string,
  got: { size: number; digest: string },
  label: string,
  digestName: string,
): Promise<void> {
  if (got.size !== file.size || got.digest !== file.etag) {
    await fs.rm(partial, { force: true });
    throw new Error(
      `${label}: downloaded ${got.size} bytes with ${digestName} ${got.digest}, expected ${file.size} bytes with ${file.etag}; fetching it again`,
    );
  }
  const final = blobPath(request.weightsDir, manifest.repo, file.etag);
  await fs.rename(partial, final);
  const stat = await fs.stat(final);
  manifest.verified[file.etag] = { size: stat.size, mtimeMs: stat.mtimeMs };
  request.progress.fileFinished(file.path);
}

/** snapshots/<commit>/<path> → ../../blobs/<etag>, as the HF client links them; made aside, then renamed. */
async function linkIntoSnapshot(weightsDir: string, repo: string, dirs: ListingDirs, file: ManifestFile, what: string): Promise<void> {
  const link = resolve(dirs.snapshot, file.path);
  await fs.mkdir(dirname(link), { recursive: true });
  const blob = blobPath(weightsDir, repo, file.etag);
  const target = relative(dirname(link), blob);
  checkCacheLink(what, dirs, link, target, blob);
  if ((await fs.readlink(link).catch(() => undefined)) === target) return;
  const aside = `${link}.llmgw-${process.pid}`;
  await fs.rm(aside, { force: true });
  await fs.symlink(target, aside);
  await fs.rename(aside, link);
}
