// Makes one pinned hub revision complete in the host cache (revision-fetch.ts does what every
// store shares): lists its files once, downloads what is missing or corrupt on the download
// threads (resuming from a partial file's length with a range request) and verifies each file
// against the hub's digest. Agent side.
import { createReadStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { leaseDownloadThreads, type DownloadThreads } from './download-threads.js';
import { newHash, type DigestKind, type DownloadJob } from './download.js';
import { hubFileRequest, listCommitFiles, type HubEndpoint } from './hub-client.js';
import { readManifest, type Manifest } from './manifest.js';
import { WeightsError } from './errors.js';
import { fetchFromStore, partialOf, putInPlace, type FetchCommon, type FetchRevisionResult, type ManifestFile } from './revision-fetch.js';

export interface FetchRevisionRequest extends FetchCommon {
  repo: string;
  commit: string;
  endpoint: HubEndpoint;
}

export async function fetchRevision(request: FetchRevisionRequest): Promise<FetchRevisionResult> {
  const { weightsDir, repo, commit, endpoint } = request;
  const manifest = readManifest(weightsDir, repo, commit);
  // A revision never listed here is about to be downloaded: the threads start while it is listed.
  let lease = manifest ? undefined : leaseDownloadThreads();
  const threads = (): DownloadThreads => (lease ??= leaseDownloadThreads()).threads;
  try {
    return await fetchFromStore(request, { repo, commit }, manifest, {
      digestName: 'digest',
      list: () =>
        listCommitFiles(endpoint, repo, commit).catch((error: unknown) => {
          throw WeightsError.fromHub(error, repo, commit, endpoint);
        }),
      digestOf: digestOfFile,
      download: (listed, file, signal) => download(request, listed, file, threads(), signal),
    });
  } finally {
    lease?.release();
  }
}

function digestKind(file: ManifestFile): DigestKind {
  return file.sha256 !== undefined ? 'sha256' : 'git-blob';
}

async function digestOfFile(path: string, file: ManifestFile): Promise<string> {
  const hash = newHash(digestKind(file), file.size);
  await pipeline(createReadStream(path), hash);
  return hash.digest('hex');
}

/** Downloads one file on a download thread; the bytes already there are hashed first (on the thread), so the whole file is verified. */
async function download(
  request: FetchRevisionRequest,
  manifest: Manifest,
  file: ManifestFile,
  threads: DownloadThreads,
  signal: AbortSignal,
): Promise<boolean> {
  const { weightsDir, repo, commit, progress } = request;
  const { partial, offset } = await partialOf(weightsDir, repo, file);
  if (offset > 0) progress.resumed(offset);
  progress.fileStarted(file.path);
  const job: DownloadJob = {
    ...hubFileRequest(request.endpoint, repo, commit, file.path),
    partial,
    offset,
    size: file.size,
    digest: digestKind(file),
  };
  const got = await threads
    .run(job, { bytes: (count) => progress.bytes(count), restarted: (kept) => progress.resumed(-kept) }, signal)
    .catch((error: unknown) => {
      throw WeightsError.fromDisk(error, weightsDir) ?? WeightsError.fromHub(error, repo, commit, request.endpoint);
    });
  await putInPlace(request, manifest, file, partial, got, `${repo}@${commit.slice(0, 12)}/${file.path}`, 'digest');
  return offset > 0;
}
