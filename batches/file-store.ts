// Where the files of the Files API live (a batch's input, later its output): the FileStore
// interface, the metadata kept beside each file, and the directory store, the default. Router
// side; batches/s3-file-store.ts is the other store. Content is streamed in and out and never
// passes through Temporal: a workflow is given a file's id, never its bytes.
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { chunkOwner } from './batch-lines.js';

/** The purposes a file may have: a batch's input (`batch`), or its output and error files (`batch_output`, as OpenAI's). */
export const FILE_PURPOSES = ['batch', 'batch_output'] as const;
export type FilePurpose = (typeof FILE_PURPOSES)[number];
/** The purposes a client may upload: a batch's output is written by its batch alone. */
export const UPLOAD_PURPOSES = ['batch'] as const satisfies readonly FilePurpose[];
export type UploadPurpose = (typeof UPLOAD_PURPOSES)[number];

/** OpenAI's limit on a batch's input file, and ours by default. */
export const DEFAULT_MAX_FILE_BYTES = 200 * 1024 * 1024;

const FILE_ID = /^file-[A-Za-z0-9]{1,64}$/;

/** Whether `id` can name a stored file (also what keeps a path built from it inside the store). */
export function isFileId(id: string): boolean {
  return FILE_ID.test(id);
}

/** A new file id, `file-` and 24 hex digits (96 random bits). */
export function newFileId(): string {
  return `file-${randomBytes(12).toString('hex')}`;
}

/**
 * What is kept beside a file's bytes. A zod schema because it is read back from disk or a bucket
 * that others may write to; `owner` is the uploading API key's id (http/auth.ts `ApiKey.id`), null
 * when the router had no keys.
 */
export const StoredFile = z.object({
  id: z.string().regex(FILE_ID),
  bytes: z.number().int().min(0),
  /** Unix seconds. */
  createdAt: z.number().int().min(0),
  filename: z.string(),
  purpose: z.enum(FILE_PURPOSES),
  owner: z.string().nullable(),
});
export type StoredFile = z.infer<typeof StoredFile>;

/** A body over the store's size limit: answered 413. */
export class FileTooLargeError extends Error {
  override name = 'FileTooLargeError';
  constructor(readonly maxBytes: number) {
    super(`the file is larger than ${maxBytes} bytes`);
  }
}

/** Bytes received and counted, not yet listed: committed under its metadata, or discarded. */
export interface StagedFile {
  readonly bytes: number;
  commit(meta: StoredFile): Promise<void>;
  discard(): Promise<void>;
}

export interface FileStore {
  /** Where files live, as a log line or an error may say it (no credentials). */
  readonly location: string;
  /**
   * Reads `content` to its end into a place nothing lists, counting its bytes; throws
   * FileTooLargeError (having dropped what it wrote) past `maxBytes`.
   */
  stage(content: Readable, maxBytes: number): Promise<StagedFile>;
  /** A file's metadata, or undefined when there is no such file. */
  stat(id: string): Promise<StoredFile | undefined>;
  /**
   * A file's bytes as a stream from `fromByte` (0: the start; past the end: none), or undefined
   * when there is no such file. A batch's chunk starts where its line index says.
   */
  open(id: string, fromByte?: number): Promise<Readable | undefined>;
  /** Every committed file's metadata, in no particular order. */
  list(): Promise<StoredFile[]>;
  /** Removes a file; false when there was none. */
  delete(id: string): Promise<boolean>;
}

/** Stages and commits in one step: what a caller that already knows the metadata uses. */
export async function putFile(store: FileStore, content: Readable, meta: Omit<StoredFile, 'bytes'>, maxBytes: number): Promise<StoredFile> {
  const staged = await store.stage(content, maxBytes);
  const full = { ...meta, bytes: staged.bytes };
  await staged.commit(full);
  return full;
}

/**
 * Writes one of a batch's own files (a chunk's results, its line index, its grant) whole, staged
 * and renamed over any earlier try's, owned by chunkOwner so that no key lists or reads it.
 */
export async function putBatchFile(files: FileStore, batchId: string, id: string, filename: string, bytes: Buffer): Promise<void> {
  await putFile(
    files,
    Readable.from([bytes]),
    { id, createdAt: Math.floor(Date.now() / 1000), filename, purpose: 'batch', owner: chunkOwner(batchId) },
    bytes.length,
  );
}

/** A metadata document read back: undefined when it is not one of ours (a stray object, a hand edit). */
export function parseStoredFile(text: string): StoredFile | undefined {
  try {
    const parsed = StoredFile.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Writes `content` to `path` (created, never overwritten), flushed to disk, counting bytes;
 * past `maxBytes` the partial file is removed and FileTooLargeError thrown. Resolves to the count.
 */
export async function spoolToFile(content: Readable, path: string, maxBytes: number): Promise<number> {
  let bytes = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      bytes += chunk.length;
      if (bytes > maxBytes) done(new FileTooLargeError(maxBytes));
      else done(null, chunk);
    },
  });
  try {
    await pipeline(content, counter, createWriteStream(path, { flags: 'wx', mode: 0o600 }));
    const handle = await open(path, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
    return bytes;
  } catch (err) {
    await unlink(path).catch(() => undefined);
    throw err;
  }
}

const STAGING = '.staging-';
/** Leftovers of a crash (a staged upload, content whose metadata never landed) older than this are removed at start. */
const LEFTOVER_AGE_MS = 60 * 60 * 1000;

/**
 * Files in a directory: `<id>` holds the bytes, `<id>.json` the metadata. Both land by rename
 * from a staging name, the bytes first: a file is listed only once its metadata exists, so a
 * crash at any point leaves nothing half-written in the listing. Several router processes
 * (--workers) may share the directory.
 */
export class DirectoryFileStore implements FileStore {
  readonly location: string;

  private constructor(private readonly dir: string) {
    this.location = dir;
  }

  /** The store, its directory created (0700) and a crash's old leftovers removed. */
  static async open(dir: string): Promise<DirectoryFileStore> {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const store = new DirectoryFileStore(dir);
    await store.removeLeftovers(Date.now() - LEFTOVER_AGE_MS);
    return store;
  }

  async stage(content: Readable, maxBytes: number): Promise<StagedFile> {
    const staging = join(this.dir, `${STAGING}${randomBytes(8).toString('hex')}`);
    const bytes = await spoolToFile(content, staging, maxBytes);
    return {
      bytes,
      commit: async (meta) => {
        await rename(staging, this.contentPath(meta.id));
        const metaStaging = `${staging}.json`;
        await writeFile(metaStaging, JSON.stringify(meta), { flag: 'wx', mode: 0o600, flush: true });
        await rename(metaStaging, this.metaPath(meta.id));
      },
      discard: () => unlink(staging).catch(() => undefined),
    };
  }

  async stat(id: string): Promise<StoredFile | undefined> {
    if (!isFileId(id)) return undefined;
    const text = await readFile(this.metaPath(id), 'utf8').catch(ifMissing(undefined));
    const meta = text === undefined ? undefined : parseStoredFile(text);
    return meta?.id === id ? meta : undefined;
  }

  async open(id: string, fromByte = 0): Promise<Readable | undefined> {
    if ((await this.stat(id)) === undefined) return undefined;
    const handle = await open(this.contentPath(id), 'r').catch(ifMissing(undefined));
    return handle?.createReadStream({ start: fromByte });
  }

  async list(): Promise<StoredFile[]> {
    const names = await readdir(this.dir);
    const out: StoredFile[] = [];
    for (const name of names) {
      if (!name.endsWith('.json') || !isFileId(name.slice(0, -5))) continue;
      const meta = await this.stat(name.slice(0, -5));
      if (meta !== undefined) out.push(meta);
    }
    return out;
  }

  async delete(id: string): Promise<boolean> {
    if (!isFileId(id)) return false;
    // The metadata first: once it is gone the file is not listed, whatever happens to the bytes.
    const removed = await unlink(this.metaPath(id)).then(() => true, ifMissing(false));
    await unlink(this.contentPath(id)).catch(ifMissing(undefined));
    return removed;
  }

  private contentPath(id: string): string {
    return join(this.dir, id);
  }

  private metaPath(id: string): string {
    return join(this.dir, `${id}.json`);
  }

  private async removeLeftovers(before: number): Promise<void> {
    const names = new Set(await readdir(this.dir));
    for (const name of names) {
      const orphan = isFileId(name) && !names.has(`${name}.json`);
      if (!name.startsWith(STAGING) && !orphan) continue;
      const info = await stat(join(this.dir, name)).catch(() => undefined);
      if (info !== undefined && info.mtimeMs < before) await unlink(join(this.dir, name)).catch(() => undefined);
    }
  }
}

/** A catch handler: ENOENT becomes `value`, anything else is thrown on. */
function ifMissing<T>(value: T): (err: unknown) => T {
  return (err) => {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return value;
    throw err;
  };
}
