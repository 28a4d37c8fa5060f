// Where an S3 source lives in the host cache: the Hugging Face layout's shape under a folder of
// its own, `s3--BUCKET--PREFIX/{blobs/<ETag>, snapshots/<digest hex>/<path under the prefix>}`,
// so an engine is given a plain directory of the model's files (links into blobs/), and files
// unchanged between two pins of a prefix are stored once. Agent side; pure.
import { createHash } from 'node:crypto';
import { formatModelSource, type S3Source } from '../../common/model-source.js';

/** The manifest's `repo` of an S3 source: its location without the digest. */
export function s3CacheRepo(source: S3Source): string {
  return formatModelSource({ kind: 's3', bucket: source.bucket, prefix: source.prefix.replace(/\/+$/, '') });
}

export function isS3CacheRepo(repo: string): boolean {
  return repo.startsWith('s3://');
}

/**
 * `s3://my-bucket/models/llama` → `s3--my-bucket--models--llama`. A prefix with characters a
 * folder name should not carry, or with `--` of its own, gets them replaced and a short hash of
 * the location appended, so two locations never share a folder.
 */
export function s3FolderName(repo: string): string {
  const location = repo.slice('s3://'.length);
  const plain = location.split('/').join('--');
  if (/^[A-Za-z0-9._-]+$/.test(plain) && !location.includes('--')) return `s3--${plain}`;
  const hash = createHash('sha256').update(location).digest('hex').slice(0, 12);
  return `s3--${plain.replace(/[^A-Za-z0-9._-]/g, '_')}-${hash}`;
}
