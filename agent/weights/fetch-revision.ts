// Makes one pinned hub revision complete in the host cache: lists its files once (kept in a
// manifest, so a cached revision needs no hub at all), checks what is on disk, downloads what
// is missing or corrupt into `<blob>.incomplete` (resuming from its length with a range
// request), verifies each file against the hub's digest, renames it into place and links the
// snapshot. Agent side.
import { createHash, type Hash } from 'node:crypto';
import { createReadStream, promises as fs } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { blobPath, incompletePath, snapshotDir } from './cache-layout.js';
import { listCommitFiles, openFileFrom, type HubEndpoint, type RemoteFile } from './hub-client.js';
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
  /** Files downloaded by this call, with the reason (missing, corrupt). */
  fetched: { path: string; why: 'missing' | 'corrupt' | 'resumed' }[];
}

export async function fetchRevision(request: FetchRevisionRequest): Promise<FetchRevisionResult> {
  const { weightsDir, repo, commit, progress } = request;
  let manifest = readManifest(weightsDir, repo, commit);
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
    if (state === 'ok') progress.fileDone(file.size);
    else todo.push({ file, why: state });
    if (state === 'corrupt')
      request.log(`weights ${repo}@${commit.slice(0, 12)}: ${file.path} does not match its digest; fetching it again`);
  }
  writeManifest(weightsDir, manifest);

  const remaining = todo.reduce((sum, t) => sum + t.file.size, 0);
  if (remaining > 0) await request.reserve(remaining);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < todo.length) {
      const item = todo[next++]!;
      request.signal.throwIfAborted();
      const resumed = await download(request, manifest, item.file);
      if (resumed && item.why === 'missing') item.why = 'resumed';
      writeManifest(weightsDir, manifest);
    }
  };
  await Promise.all(Array.from({ length: Math.min(request.concurrency ?? 4, todo.length) }, worker));

  const dir = snapshotDir(weightsDir, repo, commit);
  for (const file of manifest.files) await linkIntoSnapshot(weightsDir, repo, dir, file);
  manifest.lastUsedAt = Date.now();
  writeManifest(weightsDir, manifest);
  return {
    snapshotPath: dir,
    bytesTotal: manifest.bytesTotal,
    bytesFetched: progress.bytesFetched(),
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

function newHash(file: RemoteFile): Hash {
  if (file.sha256 !== undefined) return createHash('sha256');
  // A file kept in git is named by its blob id: sha1 over "blob <size>\0" and the content.
  return createHash('sha1').update(`blob ${file.size}\0`);
}

async function digestOfFile(path: string, file: RemoteFile, end?: number): Promise<string> {
  const hash = newHash(file);
  await pipeline(createReadStream(path, end === undefined ? {} : { end: end - 1 }), hash);
  return hash.digest('hex');
}

/** Downloads one file into `<blob>.incomplete`, resuming what is there; says whether it resumed. */
async function download(request: FetchRevisionRequest, manifest: Manifest, file: RemoteFile): Promise<boolean> {
  const { weightsDir, repo, commit, progress } = request;
  const partial = incompletePath(weightsDir, repo, file.etag);
  await fs.mkdir(dirname(partial), { recursive: true });
  let offset = (await fs.stat(partial).catch(() => undefined))?.size ?? 0;
  if (offset > file.size) {
    await fs.rm(partial, { force: true });
    offset = 0;
  }
  // The bytes already there feed the hash first, so the whole file is verified at the end.
  let hash = newHash(file);
  if (offset > 0) {
    for await (const chunk of createReadStream(partial) as AsyncIterable<Buffer>) hash.update(chunk);
    progress.resumed(offset);
  }
  progress.fileStarted(file.path);
  if (offset < file.size) {
    const { from, body } = await openFileFrom(request.endpoint, repo, commit, file, offset, request.signal).catch((error: unknown) => {
      throw WeightsError.fromHub(error, repo, commit, request.endpoint);
    });
    if (from === 0 && offset > 0) {
      // The server ignored the range: start the file over.
      hash = newHash(file);
      progress.resumed(-offset);
    }
    try {
      await appendBody(body, partial, from > 0, request.signal, (chunk) => {
        hash.update(chunk);
        progress.bytes(chunk.length);
      });
    } catch (error) {
      throw WeightsError.fromDisk(error, request.weightsDir) ?? error;
    }
  }
  const size = (await fs.stat(partial)).size;
  const digest = hash.digest('hex');
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

/**
 * Writes a response body to the file, gathering chunks into large vectored writes: the
 * reads, the hash and the writes overlap, and a 400 GB model is not millions of small writes.
 */
async function appendBody(
  body: AsyncIterable<Buffer>,
  path: string,
  append: boolean,
  signal: AbortSignal,
  onChunk: (chunk: Buffer) => void,
): Promise<void> {
  const file = await fs.open(path, append ? 'a' : 'w');
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let writing: Promise<unknown> = Promise.resolve();
  try {
    for await (const chunk of body) {
      signal.throwIfAborted();
      onChunk(chunk);
      pending.push(chunk);
      pendingBytes += chunk.length;
      if (pendingBytes >= WRITE_BATCH_BYTES) {
        await writing;
        const batch = pending;
        pending = [];
        pendingBytes = 0;
        writing = file.writev(batch);
      }
    }
    signal.throwIfAborted();
    await writing;
    if (pending.length) await file.writev(pending);
  } finally {
    await writing.catch(() => undefined);
    await file.close();
  }
}

const WRITE_BATCH_BYTES = 4 * 1024 * 1024;

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
