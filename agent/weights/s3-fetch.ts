// Makes one pinned S3 revision complete in the host cache, as fetch-revision.ts does for the
// hub (revision-fetch.ts does what every store shares): lists the prefix once and fetches only
// if it still has the pinned digest, downloads each missing or corrupt object by key with
// If-Match its recorded ETag (resuming with a Range request) and checks it against its ETag.
// Credentials are the agent's own (its AWS_* environment). Agent side.
import { createReadStream, promises as fs } from 'node:fs';
import { GetObjectCommand, HeadObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { ApplicationFailure } from '@temporalio/activity';
import { FailureType } from '../../common/failures.js';
import { formatModelSource, type S3Source } from '../../common/model-source.js';
import { explainS3Error, listS3Objects, s3Digest, s3FolderPrefix, type S3Object } from '../../common/s3-store.js';
import { findPinnedVersions } from '../../common/s3-versions.js';
import { cachedRevisionOf } from './cache-layout.js';
import { WeightsError } from './errors.js';
import { readManifest, type Manifest } from './manifest.js';
import { fetchFromStore, partialOf, putInPlace, type FetchCommon, type FetchRevisionResult, type ManifestFile } from './revision-fetch.js';
import { isVerifiableEtag, multipartCount, S3EtagHash } from './s3-etag.js';

export interface FetchS3Request extends FetchCommon {
  /** Pinned: `s3://BUCKET/PREFIX@sha256:…`. */
  source: S3Source;
  client: S3Client;
  /** Whose environment an error tells to fix: "the agent on NODE". */
  who: string;
}

export async function fetchS3Revision(request: FetchS3Request): Promise<FetchRevisionResult> {
  const revision = cachedRevisionOf(request.source)!;
  const manifest = readManifest(request.weightsDir, revision.repo, revision.commit);
  return fetchFromStore(request, revision, manifest, {
    digestName: 'ETag',
    list: () =>
      listPinned(request, revision.repo).catch((error: unknown) => {
        throw failureOf(error, request, revision.repo);
      }),
    digestOf: etagOfFile,
    download: (listed, file, signal) =>
      download(request, listed, file, signal).catch((error: unknown) => {
        throw WeightsError.fromDisk(error, request.weightsDir) ?? failureOf(error, request, `${revision.repo}/${file.path}`);
      }),
  });
}

/** The prefix's objects, refused unless they are exactly those pinned; multipart part sizes asked once. */
async function listPinned(request: FetchS3Request, repo: string): Promise<ManifestFile[]> {
  const { source, client, signal } = request;
  let objects: (S3Object & { versionId?: string })[] = await listS3Objects(client, source.bucket, source.prefix, signal);
  const now = s3Digest(objects);
  if (now !== source.digest) {
    // Overwritten or deleted since the pin: a versioned bucket still holds the pinned objects.
    // A store that keeps no versions (or refuses to list them) has none to offer; a listing
    // refused by its check (listing-paths.ts) is said as it is.
    const versions = await findPinnedVersions(client, source.bucket, source.prefix, source.digest!, signal).catch((error: unknown) => {
      if (error instanceof ApplicationFailure) throw error;
      return undefined;
    });
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

/** One object into `<blob>.incomplete`, resuming what is there; says whether it resumed. */
async function download(request: FetchS3Request, manifest: Manifest, file: ManifestFile, signal: AbortSignal): Promise<boolean> {
  const { weightsDir, source, progress } = request;
  const { partial, offset } = await partialOf(weightsDir, manifest.repo, file);
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
  const got = { size: (await fs.stat(partial)).size, digest: hash.digest() };
  await putInPlace(request, manifest, file, partial, got, `${manifest.repo}/${file.path}`, 'ETag');
  return offset > 0;
}

const WRITE_BATCH_BYTES = 4 * 1024 * 1024;
