// Where the host's weights cache keeps things: the Hugging Face cache layout
// (models--ORG--NAME/{blobs,snapshots/<commit>}), so vLLM and SGLang read it offline, plus
// llmgw's own manifests beside it. Agent side; pure path arithmetic.
import { join } from 'node:path';
import {
  isFetched,
  isFetchedByLlmgw,
  modelArgOf,
  modelSourceOf,
  pinnedRevisionOf,
  type HubSource,
  type S3Source,
} from '../../common/model-source.js';
import { isS3CacheRepo, s3CacheRepo, s3FolderName } from './s3-layout.js';

/** The HF cache's folder of one repository: `models--ORG--NAME`; an S3 source's is `s3--BUCKET--PREFIX` (s3-layout.ts). */
export function repoFolderName(repo: string): string {
  if (isS3CacheRepo(repo)) return s3FolderName(repo);
  return `models--${repo.split('/').join('--')}`;
}

export function repoDir(weightsDir: string, repo: string): string {
  return join(weightsDir, repoFolderName(repo));
}

export function blobsDir(weightsDir: string, repo: string): string {
  return join(repoDir(weightsDir, repo), 'blobs');
}

/** Blobs are named by the hub's ETag: the LFS sha256, or the git blob id of a small file. */
export function blobPath(weightsDir: string, repo: string, etag: string): string {
  return join(blobsDir(weightsDir, repo), etag);
}

/** Where a blob is written while it arrives (the HF client's own name for it, so it resumes ours). */
export function incompletePath(weightsDir: string, repo: string, etag: string): string {
  return `${blobPath(weightsDir, repo, etag)}.incomplete`;
}

export function snapshotDir(weightsDir: string, repo: string, commit: string): string {
  return join(repoDir(weightsDir, repo), 'snapshots', commit);
}

/** llmgw's record of a revision (files, digests, verified blobs, last use), outside the HF layout. */
export function manifestPath(weightsDir: string, repo: string, commit: string): string {
  return join(weightsDir, '.llmgw', 'manifests', `${repoFolderName(repo)}@${commit}.json`);
}

export function manifestsDir(weightsDir: string): string {
  return join(weightsDir, '.llmgw', 'manifests');
}

/**
 * The directory an engine is given for a source, or undefined when the engine gets the
 * source itself (modelArgOf: an engine:// source, or a hub id a revision of 0.2.0 carries
 * unpinned). A `file://` source is used in place; a fetched one is read from its snapshot in
 * the host cache.
 */
export function localModelPath(modelSource: string, weightsDir: string | undefined): string | undefined {
  const source = modelSourceOf(modelSource);
  if (source.kind === 'file') return source.path;
  // Unpinned (a hub id a revision of 0.2.0 carries): the engine gets the source itself.
  if (!isFetched(source) || !isFetchedByLlmgw(source) || weightsDir === undefined) return undefined;
  const revision = cachedRevisionOf(source);
  return revision && snapshotDir(weightsDir, revision.repo, revision.commit);
}

/** The cache's name of a pinned fetched source: repository (or `s3://BUCKET/PREFIX`) and commit (or digest hex). */
export function cachedRevisionOf(source: HubSource | S3Source): { repo: string; commit: string } | undefined {
  if (source.kind === 'hf') return source.ref === undefined ? undefined : { repo: source.repo, commit: source.ref };
  return source.digest === undefined ? undefined : { repo: s3CacheRepo(source), commit: pinnedRevisionOf(source) };
}

/** The model an engine is started with: the local directory, or what the source hands it. */
export function engineModelArg(modelSource: string, weightsDir: string | undefined): string {
  return localModelPath(modelSource, weightsDir) ?? modelArgOf(modelSourceOf(modelSource));
}

export function hubRevisionOf(source: HubSource): { repo: string; commit: string } {
  return { repo: source.repo, commit: pinnedRevisionOf(source) };
}
