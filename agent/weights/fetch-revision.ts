// Makes one pinned hub revision complete in the host cache: lists its files once (kept in a
// manifest, so a cached revision needs no hub at all), checks what is on disk, downloads what
// is missing or corrupt into `<blob>.incomplete` (resuming from its length with a range
// request), verifies each file against the hub's digest, renames it into place and links the
// snapshot. Agent side.
import { createReadStream, promises as fs } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { leaseDownloadThreads, type DownloadThreads } from './download-threads.js';
import { newHash, type DigestKind, type DownloadJob } from './download.js';
import { blobPath, incompletePath, snapshotDir } from './cache-layout.js';
import { hubFileRequest, listCommitFiles, type HubEndpoint, type RemoteFile } from './hub-client.js';
import { readManifest, writeManifest, type Manifest } from './manifest.js';
import { WeightsError } from './errors.js';
import type { FetchProgress } from './progress.js';

export interface FetchRevisionRequest {
  weightsDir: string;
  repo: string;
  commit: string;
  endpoint: HubEndpoint;
  progress: FetchProgress;
  signal: AbortSignal;
  /** Makes room for `bytes` more in the cache (eviction), or throws WeightsNoSpace. */
  reserve(bytes: number): Promise<void>;
  log(line: string): void;
  /** Files downloaded at once. */
  concurrency?: number;
}

export interface FetchRevisionResult {
  snapshotPath: string;
  bytesTotal: number;
  /** Bytes downloaded by this call (0: the revision was complete in the cache). */
  bytesFetched: number;
  /** Seconds from the first download's request to the last file in place (FetchProgress.transferSeconds). */
  transferSeconds: number;
  /** Files downloaded by this call, with the reason (missing, corrupt). */
  fetched: { path: string; why: 'missing' | 'corrupt' | 'resumed' }[];
}

export async function fetchRevision(request: FetchRevisionRequest): Promise<FetchRevisionResult> {
  const manifest = readManifest(request.weightsDir, request.repo, request.commit);
  // A revision never listed here is about to be downloaded: the threads start while it is listed.
  let lease = manifest ? undefined : leaseDownloadThreads();
  try {
    return await fetchListed(request, manifest, () => (lease ??= leaseDownloadThreads()).threads);
  } finally {
    lease?.release();
  }
}

async function fetchListed(
  request: FetchRevisionRequest,
  listed: Manifest | undefined,
  downloadThreads: () => DownloadThreads,
): Promise<FetchRevisionResult> {
  const { weightsDir, repo, commit, progress } = request;
  let manifest = listed;
  if (!manifest) {
    const files = await listCommitFiles(request.endpoint, repo, commit).catch((error: unknown) => {
      throw WeightsError.fromHub(error, repo, commit, request.endpoint);
    });
    manifest = { repo, commit, files, verified: {}, lastUsedAt: Date.now(), bytesTotal: files.reduce((sum, f) => sum + f.size, 0) };
    writeManifest(weightsDir, manifest);
  }
  manifest.lastUsedAt = Date.now();
  progress.begin(manifest.bytesTotal, manifest.files.length);

  // What is on disk and sound counts as done; the rest is fetched.
  const todo: { file: RemoteFile; why: 'missing' | 'corrupt' | 'resumed' }[] = [];
  for (const file of manifest.files) {
    const state = await checkBlob(weightsDir, manifest, file);
    // Two paths with the same content share a blob: it is fetched once (and never twice at once).
    if (state === 'ok' || todo.some((t) => t.file.etag === file.etag)) progress.fileDone(file.size);
    else todo.push({ file, why: state });
    if (state === 'corrupt')
      request.log(`weights ${repo}@${commit.slice(0, 12)}: ${file.path} does not match its digest; fetching it again`);
  }
  writeManifest(weightsDir, manifest);

  const remaining = todo.reduce((sum, t) => sum + t.file.size, 0);
  if (remaining > 0) await request.reserve(remaining);
  // The first failure stops the other downloads, and the fetch returns once none is writing.
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(request.signal.reason);
  request.signal.addEventListener('abort', onAbort, { once: true });
  let failure: { error: unknown } | undefined;
  let next = 0;
  const worker = async (): Promise<void> => {
    try {
      while (next < todo.length) {
        const item = todo[next++]!;
        stop.signal.throwIfAborted();
        const resumed = await download(request, manifest, item.file, downloadThreads(), stop.signal);
        if (resumed && item.why === 'missing') item.why = 'resumed';
        writeManifest(weightsDir, manifest);
      }
    } catch (error) {
      failure ??= { error };
      stop.abort(error);
    }
  };
  await Promise.all(Array.from({ length: Math.min(request.concurrency ?? 4, todo.length) }, worker));
  request.signal.removeEventListener('abort', onAbort);
  if (failure) throw failure.error;

  const dir = snapshotDir(weightsDir, repo, commit);
  for (const file of manifest.files) await linkIntoSnapshot(weightsDir, repo, dir, file);
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

/**
 * A blob is trusted without reading it again when its size and mtime are those recorded when
 * it was last verified; anything else (a write into it, a truncation) rehashes it.
 */
async function checkBlob(weightsDir: string, manifest: Manifest, file: RemoteFile): Promise<'ok' | 'missing' | 'corrupt'> {
  const path = blobPath(weightsDir, manifest.repo, file.etag);
  const stat = await fs.stat(path).catch(() => undefined);
  if (!stat) return 'missing';
  const record = manifest.verified[file.etag];
  if (record && record.size === stat.size && record.mtimeMs === stat.mtimeMs) return 'ok';
  if (stat.size === file.size && (await digestOfFile(path, file)) === file.etag) {
    manifest.verified[file.etag] = { size: stat.size, mtimeMs: stat.mtimeMs };
    return 'ok';
  }
  delete manifest.verified[file.etag];
  await fs.rm(path, { force: true });
  return 'corrupt';
}

function digestKind(file: RemoteFile): DigestKind {
  return file.sha256 !== undefined ? 'sha256' : 'git-blob';
}

async function digestOfFile(path: string, file: RemoteFile): Promise<string> {
  const hash = newHash(digestKind(file), file.size);
  await pipeline(createReadStream(path), hash);
  return hash.digest('hex');
}

/** Downloads one file into `<blob>.incomplete`, resuming what is there, then verifies and renames it; says whether it resumed. */
async function download(
  request: FetchRevisionRequest,
  manifest: Manifest,
  file: RemoteFile,
  threads: DownloadThreads,
  signal: AbortSignal,
): Promise<boolean> {
  const { weightsDir, repo, commit, progress } = request;
  const partial = incompletePath(weightsDir, repo, file.etag);
  await fs.mkdir(dirname(partial), { recursive: true });
  let offset = (await fs.stat(partial).catch(() => undefined))?.size ?? 0;
  if (offset > file.size) {
    await fs.rm(partial, { force: true });
    offset = 0;
  }
  // The bytes already there are hashed first (on the download thread), so the whole file is verified.
  if (offset > 0) progress.resumed(offset);
  progress.fileStarted(file.path);
  const job: DownloadJob = {
    ...hubFileRequest(request.endpoint, repo, commit, file.path),
    partial,
    offset,
    size: file.size,
    digest: digestKind(file),
  };
  const { size, digest } = await threads
    .run(job, { bytes: (count) => progress.bytes(count), restarted: (kept) => progress.resumed(-kept) }, signal)
    .catch((error: unknown) => {
      throw WeightsError.fromDisk(error, weightsDir) ?? WeightsError.fromHub(error, repo, commit, request.endpoint);
    });
  if (size !== file.size || digest !== file.etag) {
    await fs.rm(partial, { force: true });
    throw new Error(
      `${repo}@${commit.slice(0, 12)}/${file.path}: downloaded ${size} bytes with digest ${digest}, expected ${file.size} bytes with ${file.etag}; fetching it again`,
    );
  }
  const final = blobPath(weightsDir, repo, file.etag);
  await fs.rename(partial, final);
  const stat = await fs.stat(final);
  manifest.verified[file.etag] = { size: stat.size, mtimeMs: stat.mtimeMs };
  progress.fileFinished(file.path);
  return offset > 0;
}

/** snapshots/<commit>/<path> → ../../blobs/<etag>, as the HF client links them; made aside, then renamed. */
async function linkIntoSnapshot(weightsDir: string, repo: string, dir: string, file: RemoteFile): Promise<void> {
  const link = join(dir, file.path);
  await fs.mkdir(dirname(link), { recursive: true });
  const target = relative(dirname(link), blobPath(weightsDir, repo, file.etag));
  const current = await fs.readlink(link).catch(() => undefined);
  if (current === target) return;
  const aside = `${link}.llmgw-${process.pid}`;
  await fs.rm(aside, { force: true });
  await fs.symlink(target, aside);
  await fs.rename(aside, link);
}
