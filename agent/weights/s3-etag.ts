// Recomputes an S3 ETag from the bytes, to verify a fetched file against what the store
// listed: the MD5 of the content for a single-part upload, and for a multipart upload the MD5
// of the parts' MD5s followed by `-PARTS`, over parts of the size the object's first part has
// (every part but the last is that size when the AWS CLI, the SDKs, rclone or s5cmd upload).
// Agent side; pure.
import { createHash, type Hash } from 'node:crypto';

/** `-N` at the end: a multipart upload's ETag, with N parts. */
export function multipartCount(etag: string): number | undefined {
  const match = /^[0-9a-f]{32}-(\d+)$/.exec(etag);
  return match ? Number(match[1]) : undefined;
}

/** Whether llmgw can check the bytes against this ETag (an MD5, or an MD5 of part MD5s). */
export function isVerifiableEtag(etag: string): boolean {
  return /^[0-9a-f]{32}$/.test(etag) || multipartCount(etag) !== undefined;
}

export class S3EtagHash {
  private part: Hash = createHash('md5');
  private partBytes = 0;
  private readonly partDigests: Buffer[] = [];

  /** `partSize` for a multipart ETag; undefined for a single-part one. */
  constructor(private readonly partSize: number | undefined) {}

  update(chunk: Buffer): void {
    if (this.partSize === undefined) {
      this.part.update(chunk);
      return;
    }
    let offset = 0;
    while (offset < chunk.length) {
      const take = Math.min(chunk.length - offset, this.partSize - this.partBytes);
      this.part.update(chunk.subarray(offset, offset + take));
      this.partBytes += take;
      offset += take;
      if (this.partBytes === this.partSize) {
        this.partDigests.push(this.part.digest());
        this.part = createHash('md5');
        this.partBytes = 0;
      }
    }
  }

  digest(): string {
    if (this.partSize === undefined) return this.part.digest('hex');
    if (this.partBytes > 0 || this.partDigests.length === 0) this.partDigests.push(this.part.digest());
    return `${createHash('md5').update(Buffer.concat(this.partDigests)).digest('hex')}-${this.partDigests.length}`;
  }
}
