// S3 sources, the pure parts: the digest that pins a prefix, the cache folder and snapshot an
// engine is given, the ETag recomputed from bytes (single-part and multipart), and refusals
// from the store turned into messages that name what to set and where.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { s3Digest, explainS3Error, s3FolderPrefix, type S3Object } from '../../common/s3-store.js';
import { localModelPath } from '../../agent/weights/cache-layout.js';
import { s3FolderName } from '../../agent/weights/s3-layout.js';
import { isVerifiableEtag, multipartCount, S3EtagHash } from '../../agent/weights/s3-etag.js';

const objects: S3Object[] = [
  { path: 'config.json', key: 'llama/config.json', size: 700, etag: 'a'.repeat(32) },
  { path: 'model.safetensors', key: 'llama/model.safetensors', size: 9_000_000, etag: `${'b'.repeat(32)}-2` },
];

describe('S3 sources', () => {
  it('pins a prefix by a digest that any added, removed, resized or replaced object changes', () => {
    const digest = s3Digest(objects);
    expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(s3Digest([...objects])).toBe(digest);
    expect(s3Digest(objects.slice(1))).not.toBe(digest);
    expect(s3Digest([{ ...objects[0]!, etag: 'c'.repeat(32) }, objects[1]!])).not.toBe(digest);
    expect(s3Digest([{ ...objects[0]!, size: 701 }, objects[1]!])).not.toBe(digest);
    expect(s3Digest([{ ...objects[0]!, path: 'config2.json' }, objects[1]!])).not.toBe(digest);
    expect(s3FolderPrefix('models/llama')).toBe('models/llama/');
    expect(s3FolderPrefix('')).toBe('');
  });

  it('gives the engine a snapshot directory of the pinned digest under a folder of the location', () => {
    const hex = 'd'.repeat(64);
    expect(localModelPath(`s3://weights-bucket/models/llama@sha256:${hex}`, '/w')).toBe(
      `/w/s3--weights-bucket--models--llama/snapshots/${hex}`,
    );
    expect(localModelPath(`s3://weights-bucket/models/llama/@sha256:${hex}`, '/w')).toBe(
      `/w/s3--weights-bucket--models--llama/snapshots/${hex}`,
    );
    // Characters a folder name should not carry, or a `--` of the prefix's own: never shared.
    expect(s3FolderName('s3://b/a--b')).not.toBe(s3FolderName('s3://b/a/b'));
    expect(s3FolderName('s3://b/x y')).toMatch(/^s3--b--x_y-[0-9a-f]{12}$/);
  });

  it('recomputes single-part and multipart ETags from the bytes, whatever the chunking', () => {
    const body = Buffer.alloc(11 * 1024 + 17, 0);
    for (let i = 0; i < body.length; i++) body[i] = (i * 31) % 251;
    const md5 = (b: Buffer): Buffer => createHash('md5').update(b).digest();
    const single = new S3EtagHash(undefined);
    single.update(body.subarray(0, 100));
    single.update(body.subarray(100));
    expect(single.digest()).toBe(md5(body).toString('hex'));

    const partSize = 4 * 1024;
    const parts = [body.subarray(0, partSize), body.subarray(partSize, 2 * partSize), body.subarray(2 * partSize)];
    const expected = `${createHash('md5')
      .update(Buffer.concat(parts.map(md5)))
      .digest('hex')}-3`;
    for (const chunk of [1, 1000, 4096, 5000, body.length]) {
      const multi = new S3EtagHash(partSize);
      for (let at = 0; at < body.length; at += chunk) multi.update(body.subarray(at, at + chunk));
      expect(multi.digest(), `chunks of ${chunk}`).toBe(expected);
    }
    expect(multipartCount(expected)).toBe(3);
    expect(isVerifiableEtag(expected)).toBe(true);
    expect(isVerifiableEtag('not-an-md5')).toBe(false);
  });

  it('explains refusals from the store: what to set, and in whose environment', () => {
    const env = { AWS_ENDPOINT_URL_S3: 'http://127.0.0.1:9000' };
    const who = 'the agent on gpu-7';
    const error = (name: string, status: number) =>
      Object.assign(new Error(`${name} said no`), { name, $metadata: { httpStatusCode: status } });
    expect(explainS3Error(error('NoSuchBucket', 404), 's3://nope/x', who, env)).toMatch(
      /bucket "nope" does not exist at http:\/\/127\.0\.0\.1:9000 .*AWS_ENDPOINT_URL_S3 in the environment of the agent on gpu-7/,
    );
    expect(explainS3Error(error('AccessDenied', 403), 's3://b/x', who, env)).toMatch(
      /refused the credentials of the agent on gpu-7 .*set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY/,
    );
    expect(explainS3Error(error('CredentialsProviderError', 0), 's3://b/x', who, env)).toMatch(
      /no S3 credentials in the environment of the agent/,
    );
    expect(explainS3Error(new Error('Region is missing'), 's3://b/x', who, env)).toMatch(/set AWS_REGION/);
    expect(explainS3Error(error('InternalError', 500), 's3://b/x', who, env)).toBeUndefined();
    // An endpoint URL with a password in it is shown without.
    const withPassword = { AWS_ENDPOINT_URL_S3: 'http://minio:s3cret@127.0.0.1:9000' };
    expect(explainS3Error(error('NoSuchBucket', 404), 's3://nope/x', who, withPassword)).not.toContain('s3cret');
  });
});
