// The S3 side that the control worker (pinning) and agents (fetching) share: a client built from
// the process's own environment, the listing of a source's prefix, the digest that pins it, and
// refusals that say what to set. Endpoint and credentials stay in the process that reads them.
import { createHash } from 'node:crypto';
import { paginateListObjectsV2, S3Client } from '@aws-sdk/client-s3';
import { checkListing } from './listing-paths.js';

/** One object of a source: its path under the prefix (the file's name in the snapshot), key, size and ETag. */
export interface S3Object {
  path: string;
  key: string;
  size: number;
  /** The ETag without its quotes: an MD5 (single-part upload) or `MD5-PARTS` (multipart). */
  etag: string;
}

/**
 * A client from the environment, by the SDK's own default chain: AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, profiles, instance roles), AWS_REGION. The
 * endpoint of an S3-compatible store is AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL; such stores
 * (MinIO, Ceph, moto) are addressed path-style, which they all serve.
 */
export function s3ClientFromEnv(env: NodeJS.ProcessEnv = process.env): S3Client {
  const endpoint = s3EndpointOf(env);
  // The SDK's chain reads process.env; an environment given in its place (tests, one process
  // speaking for another) brings its own key.
  const ownKey = env !== process.env && env.AWS_ACCESS_KEY_ID && env.AWS_SECRET_ACCESS_KEY;
  return new S3Client({
    ...(endpoint ? { endpoint, forcePathStyle: true } : {}),
    ...(ownKey
      ? {
          credentials: {
            accessKeyId: env.AWS_ACCESS_KEY_ID!,
            secretAccessKey: env.AWS_SECRET_ACCESS_KEY!,
            ...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}),
          },
        }
      : {}),
    ...(env.AWS_REGION || env.AWS_DEFAULT_REGION ? { region: env.AWS_REGION || env.AWS_DEFAULT_REGION } : {}),
    followRegionRedirects: true,
    maxAttempts: 3,
  });
}

export function s3EndpointOf(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.AWS_ENDPOINT_URL_S3 || env.AWS_ENDPOINT_URL || undefined;
}

/** The endpoint as a message may show it: without user:password, should a URL carry one. */
export function shownS3Endpoint(env: NodeJS.ProcessEnv = process.env): string {
  return s3EndpointOf(env)?.replace(/\/\/[^@/]*@/, '//') ?? 'AWS S3 (no AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL set)';
}

/** The prefix as a folder: `models/llama` lists `models/llama/…`, never `models/llama-2/…`. */
export function s3FolderPrefix(prefix: string): string {
  return prefix === '' || prefix.endsWith('/') ? prefix : `${prefix}/`;
}

/** Every object under the source's prefix (folder markers left out), by path. */
export async function listS3Objects(client: S3Client, bucket: string, prefix: string, signal?: AbortSignal): Promise<S3Object[]> {
  const folder = s3FolderPrefix(prefix);
  const objects: S3Object[] = [];
  for await (const page of paginateListObjectsV2({ client }, { Bucket: bucket, Prefix: folder }, { abortSignal: signal })) {
    for (const entry of page.Contents ?? []) {
      if (entry.Key === undefined || entry.Key.endsWith('/')) continue;
      const path = entry.Key.slice(folder.length);
      objects.push({ path, key: entry.Key, size: entry.Size ?? 0, etag: (entry.ETag ?? '').replace(/"/g, '') });
    }
  }
  checkListing(`s3://${bucket}/${folder}`, objects, s3ListingFix(bucket));
  return objects.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** What an operator does about an object whose key cannot be a file of a revision. */
export function s3ListingFix(bucket: string): string {
  return `Rename or delete that object in s3://${bucket} (and its old versions, in a versioned bucket), then deploy again`;
}

/**
 * The immutable name of what a prefix holds: sha256 over each object's path, size and ETag,
 * in path order. Any object added, removed, replaced or renamed changes it.
 */
export function s3Digest(objects: S3Object[]): string {
  const hash = createHash('sha256');
  for (const object of objects) hash.update(`${JSON.stringify([object.path, object.size, object.etag])}\n`);
  return `sha256:${hash.digest('hex')}`;
}

interface S3ErrorShape {
  name?: string;
  Code?: string;
  message?: string;
  $metadata?: { httpStatusCode?: number };
}

/**
 * What a refusal from the store means and what to do about it, or undefined for a failure that
 * a retry may cure (a cut connection, a 5xx). `who` is whose environment to fix: "the control
 * worker" or "the agent on NODE".
 */
export function explainS3Error(error: unknown, location: string, who: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const shape = (error ?? {}) as S3ErrorShape;
  const code = shape.name ?? shape.Code ?? '';
  const status = shape.$metadata?.httpStatusCode;
  const said = (shape.message ?? String(error)).split('\n')[0] ?? '';
  const endpoint = shownS3Endpoint(env);
  const bucket = /s3:\/\/([^/@\s]+)/.exec(location)?.[1] ?? location;
  if (code === 'NoSuchBucket') {
    return `${location}: bucket "${bucket}" does not exist at ${endpoint} (${said}); check the source's bucket, or AWS_ENDPOINT_URL_S3 in the environment of ${who}`;
  }
  if (code === 'CredentialsProviderError' || /Could not load credentials/.test(said)) {
    return `${location}: no S3 credentials in the environment of ${who}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY there (and AWS_ENDPOINT_URL_S3 for a store other than AWS)`;
  }
  if (/Region is missing/i.test(said)) {
    return `${location}: no region in the environment of ${who}: set AWS_REGION there (any value, such as us-east-1, for a store other than AWS)`;
  }
  if (
    ['AccessDenied', 'InvalidAccessKeyId', 'SignatureDoesNotMatch', 'InvalidToken', 'ExpiredToken', 'AllAccessDisabled'].includes(code) ||
    status === 403
  ) {
    return `${location}: ${endpoint} refused the credentials of ${who} (${code || status}: ${said}); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones) in its environment to a key that may list and read s3://${bucket}`;
  }
  return undefined;
}
