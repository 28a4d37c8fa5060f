// The Files API's store in an S3 bucket (`--files-s3 s3://bucket/prefix`), for routers on several
// hosts: `<prefix>/<id>` holds the bytes, `<prefix>/<id>.json` the metadata. The client, its
// endpoint and credentials are the weights' (common/s3-store.ts), from this process's own
// environment. Router side.
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  paginateListObjectsV2,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { explainS3Error, s3ClientFromEnv, s3FolderPrefix } from '../common/s3-store.js';
import { isFileId, parseStoredFile, spoolToFile, type FileStore, type StagedFile, type StoredFile } from './file-store.js';

/** The bucket and prefix of an `s3://bucket/prefix` location; throws naming what is wrong. */
export function parseS3Location(location: string): { bucket: string; prefix: string } {
  const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/.exec(location);
  if (m === null) throw new Error(`${location}: not an s3://BUCKET/PREFIX location`);
  return { bucket: m[1] as string, prefix: s3FolderPrefix(m[2] ?? '') };
}

/** Metadata documents read at once while listing. */
const LIST_PARALLEL = 8;

export class S3FileStore implements FileStore {
  readonly location: string;
  private readonly bucket: string;
  private readonly prefix: string;

  /**
   * `spoolDir`: where an upload waits while it is counted, since S3 takes a single-part body
   * only with its length known, and that is the length of a stream only at its end.
   */
  constructor(
    location: string,
    private readonly client: S3Client = s3ClientFromEnv(),
    private readonly spoolDir: string = tmpdir(),
  ) {
    ({ bucket: this.bucket, prefix: this.prefix } = parseS3Location(location));
    this.location = `s3://${this.bucket}/${this.prefix}`;
  }

  /**
   * Lists one key under the prefix: a wrong bucket, region or credentials stop the router at
   * start, saying what to set, rather than failing its first upload.
   */
  async check(env: NodeJS.ProcessEnv = process.env): Promise<void> {
    try {
      await this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix, MaxKeys: 1 }));
    } catch (err) {
      const why = explainS3Error(err, this.location, 'the router', env) ?? `${this.location}: ${(err as Error).message}`;
      throw new Error(`--files-s3: ${why}`, { cause: err });
    }
  }

  async stage(content: Readable, maxBytes: number): Promise<StagedFile> {
    const spool = join(this.spoolDir, `llmgw-file-${randomBytes(8).toString('hex')}`);
    const bytes = await spoolToFile(content, spool, maxBytes);
    return {
      bytes,
      commit: async (meta) => {
        try {
          // The bytes first: the metadata is what lists a file, so it is never listed without them.
          await this.client.send(
            new PutObjectCommand({
              Bucket: this.bucket,
              Key: this.contentKey(meta.id),
              Body: createReadStream(spool),
              ContentLength: bytes,
            }),
          );
          await this.client.send(
            new PutObjectCommand({
              Bucket: this.bucket,
              Key: this.metaKey(meta.id),
              Body: JSON.stringify(meta),
              ContentType: 'application/json',
            }),
          );
        } finally {
          await unlink(spool).catch(() => undefined);
        }
      },
      discard: () => unlink(spool).catch(() => undefined),
    };
  }

  async stat(id: string): Promise<StoredFile | undefined> {
    if (!isFileId(id)) return undefined;
    return this.readMeta(this.metaKey(id), id);
  }

  async open(id: string, fromByte = 0): Promise<Readable | undefined> {
    const meta = await this.stat(id);
    if (meta === undefined) return undefined;
    // S3 refuses a range that starts past the end (416): there is nothing there to read.
    if (fromByte > 0 && fromByte >= meta.bytes) return Readable.from([]);
    try {
      const answer = await this.client.send(
        new GetObjectCommand({
          Bucket: this.bucket,
          Key: this.contentKey(id),
          ...(fromByte > 0 ? { Range: `bytes=${fromByte}-` } : {}),
        }),
      );
      return answer.Body as Readable | undefined;
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw err;
    }
  }

  async list(): Promise<StoredFile[]> {
    const keys: Array<{ key: string; id: string }> = [];
    for await (const page of paginateListObjectsV2({ client: this.client }, { Bucket: this.bucket, Prefix: this.prefix })) {
      for (const entry of page.Contents ?? []) {
        const name = entry.Key?.slice(this.prefix.length) ?? '';
        if (name.endsWith('.json') && isFileId(name.slice(0, -5))) keys.push({ key: entry.Key as string, id: name.slice(0, -5) });
      }
    }
    const out: StoredFile[] = [];
    for (let at = 0; at < keys.length; at += LIST_PARALLEL) {
      const metas = await Promise.all(keys.slice(at, at + LIST_PARALLEL).map(({ key, id }) => this.readMeta(key, id)));
      for (const meta of metas) if (meta !== undefined) out.push(meta);
    }
    return out;
  }

  async delete(id: string): Promise<boolean> {
    if ((await this.stat(id)) === undefined) return false;
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.metaKey(id) }));
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.contentKey(id) }));
    return true;
  }

  private async readMeta(key: string, id: string): Promise<StoredFile | undefined> {
    try {
      const answer = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      const meta = parseStoredFile((await answer.Body?.transformToString('utf8')) ?? '');
      return meta?.id === id ? meta : undefined;
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw err;
    }
  }

  private contentKey(id: string): string {
    return `${this.prefix}${id}`;
  }

  private metaKey(id: string): string {
    return `${this.prefix}${id}.json`;
  }
}

function isMissing(err: unknown): boolean {
  const shape = err as { name?: string; $metadata?: { httpStatusCode?: number } };
  return shape.name === 'NoSuchKey' || shape.name === 'NotFound' || shape.$metadata?.httpStatusCode === 404;
}
