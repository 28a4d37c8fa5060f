// Makes one pinned S3 revision complete in the host cache, as fetch-revision.ts does for the
// hub: lists the prefix once and fetches only if it still has the pinned digest (the listing is
// kept in the manifest, so a cached revision needs no store at all), downloads each missing or
// corrupt object by key with If-Match its recorded ETag into `<blob>.incomplete` (resuming with
// a Range request), checks it against its ETag, renames it into place and links the snapshot.
// Credentials are the agent's own (its AWS_* environment). Agent side.
import { createReadStream, promises as fs } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { GetObjectCommand, HeadObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { ApplicationFailure } from '@temporalio/activity';
import { FailureType } from '../../common/failures.js';
import { formatModelSource, type S3Source } from '../../common/model-source.js';
import { explainS3Error, listS3Objects, s3Digest, s3FolderPrefix, type S3Object } from '../../common/s3-store.js';
import { findPinnedVersions } from '../../common/s3-versions.js';
import { blobPath, cachedRevisionOf, incompletePath, snapshotDir } from './cache-layout.js';
import { WeightsError } from './errors.js';
import type { FetchRevisionResult } from './fetch-revision.js';
import { readManifest, writeManifest, type Manifest } from './manifest.js';
import type { FetchProgress } from './progress.js';
import { isVerifiableEtag, multipartCount, S3EtagHash } from './s3-etag.js';

export interface FetchS3Request {
  weightsDir: string;
  /** Pinned: `s3://BUCKET/PREFIX@sha256:…`. */
  source: S3Source;
  client: S3Client;
  /** Whose environment an error tells to fix: "the agent on NODE". */
  who: string;
  progress: FetchProgress;
  signal: AbortSignal;
  reserve(bytes: number): Promise<void>;
  log(line: string): void;
  concurrency?: number;
}

type ManifestFile = Manifest['files'][number];

export async function fetchS3Revision(request: FetchS3Request): Promise<FetchRevisionResult> {
  const { weightsDir, source, progress } = request;
  const { repo, commit } = cachedRevisionOf(source)!;
  let manifest = readManifest(weightsDir, repo, commit);
  if (!manifest) {
    const files = await listPinned(request, repo).catch((error: unknown) => {
      throw failureOf(error, request, repo);
    });
    manifest = { repo, commit, files, verified: {}, lastUsedAt: Date.now(), bytesTotal: files.reduce((sum, f) => sum + f.size, 0) };
    writeManifest(weightsDir, manifest);
  }
  manifest.lastUsedAt = Date.now();
  progress.begin(manifest.bytesTotal, manifest.files.length);

  const todo: { file: ManifestFile; why: 'missing' | 'corrupt' | 'resumed' }[] = [];
  for (const file of manifest.files) {
    const state = await checkBlob(weightsDir, manifest, file);
    // Two paths with one ETag (the same bytes) share a blob: fetched once.
    if (state === 'ok' || todo.some((t) => t.file.etag === file.etag)) progress.fileDone(file.size);
    else todo.push({ file, why: state });
    if (state === 'corrupt') request.log(`weights ${repo}@${commit.slice(0, 12)}: ${file.path} does not match its ETag; fetching it again`);
  }
  writeManifest(weightsDir, manifest);

  const remaining = todo.reduce((sum, t) => sum + t.file.size, 0);
  if (remaining > 0) await request.reserve(remaining);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < todo.length) {
      const item = todo[next++]!;
      request.signal.throwIfAborted();
      const resumed = await download(request, manifest, item.file).catch((error: unknown) => {
        throw WeightsError.fromDisk(error, weightsDir) ?? failureOf(error, request, `${repo}/${item.file.path}`);
      });
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
    transferSeconds: progress.transferSeconds(),
    fetched: todo.map((t) => ({ path: t.file.path, why: t.why })),
  };
}

/** The prefix's objects, refused unless they are exactly those pinned; multipart part sizes asked once. */
async function listPinned(request: FetchS3Request, repo: string): Promise<ManifestFile[]> {
  const { source, client, signal } = request;
  let objects: (S3Object & { versionId?: string })[] = await listS3Objects(client, source.bucket, source.prefix, signal);
  const now = s3Digest(objects);
  if (now !== source.digest) {
    // Overwritten or deleted since the pin: a versioned bucket still holds the pinned objects.
    const versions = await findPinnedVersions(client, source.bucket, source.prefix, source.digest!, signal).catch(() => undefined);
    if (!versions) {
      throw ApplicationFailure.nonRetryable(
        `${repo} changed since the revision was pinned: it held ${source.digest!.slice(0, 19)}…, it holds ${objects.length ? `${now.slice(0, 19)}…` : 'no objects'} now, and no version of the bucket holds the pinned objects (or it keeps no versions); put the pinned objects back, or roll the deployment out (llmgw rollout NAME) to pin what is there now`,
        FailureType.WeightsUnavailable,
      );
    }
    request.log(`weights ${repo}: changed since the pin; fetching the pinned objects by version id`);
    objects = versions;
  }
  const files: ManifestFile[] = [];
  for (const object of objects) {
    if (!isVerifiableEtag(object.etag)) {
      throw ApplicationFailure.nonRetryable(
        `${formatModelSource(source)}: ${object.key} has ETag "${object.etag}", which is not an MD5 of its content (SSE-KMS or SSE-C?); llmgw cannot verify it`,
        FailureType.WeightsUnavailable,
      );
    }
    const file: ManifestFile = {
      path: object.path,
      size: object.size,
      etag: object.etag,
      ...(object.versionId ? { versionId: object.versionId } : {}),
    };
    if (multipartCount(object.etag) !== undefined) {
      const head = await client.send(
        // No If-Match here: a part's HEAD answers the part's own ETag (moto, and some stores),
        // and the GetObject that follows is the one that must match.
        new HeadObjectCommand({ Bucket: source.bucket, Key: object.key, PartNumber: 1, VersionId: object.versionId }),
        { abortSignal: signal },
      );
      file.partSize = head.ContentLength;
    }
    files.push(file);
  }
  return files;
}

/** A refusal from the store as a failure that says what to do; anything else is retried. */
function failureOf(error: unknown, request: FetchS3Request, what: string): unknown {
  if (error instanceof ApplicationFailure) return error;
  const code = (error as { name?: string } | undefined)?.name;
  const status = (error as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata?.httpStatusCode;
  if (code === 'PreconditionFailed' || status === 412 || code === 'NoSuchKey') {
    return ApplicationFailure.nonRetryable(
      `${what} was ${code === 'NoSuchKey' ? 'removed' : 'replaced'} since the revision was pinned; put it back, or roll the deployment out (llmgw rollout NAME) to pin what is there now`,
      FailureType.WeightsUnavailable,
    );
  }
  const explained = explainS3Error(error, formatModelSource(request.source), request.who);
  return explained ? ApplicationFailure.nonRetryable(explained, FailureType.WeightsUnavailable) : error;
}

async function etagOfFile(path: string, file: ManifestFile): Promise<string> {
  const hash = new S3EtagHash(file.partSize);
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) hash.update(chunk);
  return hash.digest();
}

/** Trusted without a read when size and mtime are those recorded at verification; otherwise hashed again. */
async function checkBlob(weightsDir: string, manifest: Manifest, file: ManifestFile): Promise<'ok' | 'missing' | 'corrupt'> {
  const path = blobPath(weightsDir, manifest.repo, file.etag);
  const stat = await fs.stat(path).catch(() => undefined);
  if (!stat) return 'missing';
  const record = manifest.verified[file.etag];
  if (record && record.size === stat.size && record.mtimeMs === stat.mtimeMs) return 'ok';
  if (stat.size === file.size && (await etagOfFile(path, file)) === file.etag) {
    manifest.verified[file.etag] = { size: stat.size, mtimeMs: stat.mtimeMs };
    return 'ok';
  }
  delete manifest.verified[file.etag];
  await fs.rm(path, { force: true });
  return 'corrupt';
}

/** One object into `<blob>.incomplete`, resuming what is there; says whether it resumed. */
async function download(request: FetchS3Request, manifest: Manifest, file: ManifestFile): Promise<boolean> {
  const { weightsDir, source, progress, signal } = request;
  const partial = incompletePath(weightsDir, manifest.repo, file.etag);
  await fs.mkdir(dirname(partial), { recursive: true });
  let offset = (await fs.stat(partial).catch(() => undefined))?.size ?? 0;
  if (offset > file.size) {
    await fs.rm(partial, { force: true });
    offset = 0;
  }
  // The bytes kept from an earlier try feed the hash first: the whole file is verified.
  let hash = new S3EtagHash(file.partSize);
  if (offset > 0) {
    for await (const chunk of createReadStream(partial) as AsyncIterable<Buffer>) hash.update(chunk);
    progress.resumed(offset);
  }
  progress.fileStarted(file.path);
  if (offset === 0) await fs.writeFile(partial, '');
  if (offset < file.size) {
    const response = await request.client.send(
      new GetObjectCommand({
        Bucket: source.bucket,
        Key: s3FolderPrefix(source.prefix) + file.path,
        VersionId: file.versionId,
        // A replaced object is refused by the store, never fetched as different bytes.
        IfMatch: `"${file.etag}"`,
        ...(offset > 0 ? { Range: `bytes=${offset}-` } : {}),
      }),
      { abortSignal: signal },
    );
    let append = offset > 0;
    if (append && !response.ContentRange?.startsWith(`bytes ${offset}-`)) {
      // The store ignored the range: start the file over.
      append = false;
      hash = new S3EtagHash(file.partSize);
      progress.resumed(-offset);
    }
    const out = await fs.open(partial, append ? 'a' : 'w');
    try {
      let batch: Buffer[] = [];
      let batchBytes = 0;
      for await (const chunk of response.Body as AsyncIterable<Buffer>) {
        signal.throwIfAborted();
        hash.update(chunk);
        progress.bytes(chunk.length);
        batch.push(chunk);
        batchBytes += chunk.length;
        if (batchBytes >= WRITE_BATCH_BYTES) {
          await out.writev(batch);
          batch = [];
          batchBytes = 0;
        }
      }
      if (batch.length) await out.writev(batch);
    } finally {
      await out.close();
    }
  }
  const size = (await fs.stat(partial)).size;
  const etag = hash.digest();
  if (size !== file.size || etag !== file.etag) {
    await fs.rm(partial, { force: true });
    throw new Error(
      `${manifest.repo}/${file.path}: downloaded ${size} bytes with ETag ${etag}, expected ${file.size} bytes with ${file.etag}; fetching it again`,
    );
  }
  const final = blobPath(weightsDir, manifest.repo, file.etag);
  await fs.rename(partial, final);
  const stat = await fs.stat(final);
  manifest.verified[file.etag] = { size: stat.size, mtimeMs: stat.mtimeMs };
  progress.fileFinished(file.path);
  return offset > 0;
}

const WRITE_BATCH_BYTES = 4 * 1024 * 1024;

/** snapshots/<digest>/<path> → ../../blobs/<etag>, made aside, then renamed. */
async function linkIntoSnapshot(weightsDir: string, repo: string, dir: string, file: ManifestFile): Promise<void> {
  const link = join(dir, file.path);
  await fs.mkdir(dirname(link), { recursive: true });
  const target = relative(dirname(link), blobPath(weightsDir, repo, file.etag));
  if ((await fs.readlink(link).catch(() => undefined)) === target) return;
  const aside = `${link}.llmgw-${process.pid}`;
  await fs.rm(aside, { force: true });
  await fs.symlink(target, aside);
  await fs.rename(aside, link);
}
