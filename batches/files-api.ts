// OpenAI's Files API on the router, for purpose `batch` (a batch's own output and error files are
// `batch_output`): upload (multipart, streamed to the store), list, retrieve, download and
// delete, with OpenAI's objects and error shapes. Router side: http/core.ts authenticates the
// request and hands it here; a file belongs to the API key that uploaded it, and another key is
// answered as if it did not exist. A batch's chunk files and line index (batch-lines.ts
// chunkOwner) are shown to no one.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ApiKey } from '../router/http/auth.js';
import { sendError } from '../router/http/errors.js';
import {
  DEFAULT_MAX_FILE_BYTES,
  UPLOAD_PURPOSES,
  FileTooLargeError,
  newFileId,
  type UploadPurpose,
  type FileStore,
  type StagedFile,
  type StoredFile,
} from './file-store.js';
import { boundaryOf, MultipartError, readMultipart } from './multipart.js';
import { isChunkOwner } from './batch-lines.js';

export const PATH_FILES = '/v1/files';

/** What the router is given to serve /v1/files (RouterOptions.files). */
export interface FilesSettings {
  store: FileStore;
  /** Largest file accepted; default 200 MB, OpenAI's limit on a batch's input. */
  maxBytes?: number;
}

/** What /v1/files answers when the router has no store. */
export const FILES_NOT_CONFIGURED =
  'The Files API is off on this router: start it with --files-dir DIR (files on local disk) or --files-s3 s3://BUCKET/PREFIX.';

/** The multipart envelope around a file (headers, boundaries, the purpose field) is allowed this much beyond the file. */
const ENVELOPE_BYTES = 64 * 1024;
/** OpenAI's largest page of a file listing, and its default. */
const MAX_LIST_LIMIT = 10_000;

/** OpenAI's file object. */
function fileObject(f: StoredFile): Record<string, unknown> {
  return {
    id: f.id,
    object: 'file',
    bytes: f.bytes,
    created_at: f.createdAt,
    filename: f.filename,
    purpose: f.purpose,
    status: 'processed',
    expires_at: null,
    status_details: null,
  };
}

function sendJson(res: ServerResponse, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/**
 * Serves a request under /v1/files, already authenticated: `key` is the caller's key, undefined
 * when the router has no keys (every file is then everyone's). Without `api`, answers what to set.
 */
export function serveFiles(
  api: FilesApi | undefined,
  req: IncomingMessage,
  res: ServerResponse,
  key: ApiKey | undefined,
  expectContinue: boolean,
): void {
  if (api === undefined) return sendError(res, 'files_not_configured', FILES_NOT_CONFIGURED);
  api.serve(req, res, key, expectContinue).catch((err: unknown) => api.failed(res, err));
}

export class FilesApi {
  private readonly store: FileStore;
  private readonly maxBytes: number;

  constructor(
    settings: FilesSettings,
    private readonly log: (line: string) => void,
  ) {
    this.store = settings.store;
    this.maxBytes = settings.maxBytes ?? DEFAULT_MAX_FILE_BYTES;
  }

  async serve(req: IncomingMessage, res: ServerResponse, key: ApiKey | undefined, expectContinue: boolean): Promise<void> {
    // The path as sent, not as a URL parser would normalise it (`/v1/files/../models`): core.ts
    // matched this same text.
    const raw = req.url ?? '/';
    const q = raw.indexOf('?');
    const path = q < 0 ? raw : raw.slice(0, q);
    const query = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
    const rest = path.slice(PATH_FILES.length).split('/');
    const method = req.method ?? 'GET';
    // rest: [''] for /v1/files, ['', id] for /v1/files/id, ['', id, 'content'] for its bytes.
    if (rest.length === 1) {
      if (method === 'POST') return this.upload(req, res, key, expectContinue);
      if (method === 'GET') return this.list(res, query, key);
      return sendError(res, 'method_not_allowed', `${method} is not allowed on ${PATH_FILES}; use GET or POST`);
    }
    const id = rest[1] ?? '';
    if (rest.length === 2 && method === 'GET') return this.retrieve(res, id, key);
    if (rest.length === 2 && method === 'DELETE') return this.remove(res, id, key);
    if (rest.length === 3 && rest[2] === 'content' && method === 'GET') return this.content(res, id, key);
    return sendError(res, 'unknown_path', `No route for ${method} ${path}`);
  }

  /** A store that failed: the client learns that much, the log learns what. */
  failed(res: ServerResponse, err: unknown): void {
    this.log(`router: files: the store at ${this.store.location} failed: ${(err as Error).message}`);
    sendError(res, 'internal', 'The file store failed; try again later.');
  }

  private async upload(req: IncomingMessage, res: ServerResponse, key: ApiKey | undefined, expectContinue: boolean): Promise<void> {
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > this.maxBytes + ENVELOPE_BYTES)
      return sendError(res, 'file_too_large', tooLargeMessage(this.maxBytes), true);
    const boundary = boundaryOf(req.headers['content-type']);
    if (boundary === undefined)
      return sendError(res, 'invalid_multipart', 'Upload a file as multipart/form-data with the fields `file` and `purpose`.');
    if (expectContinue) res.writeContinue();

    const fields = new Map<string, string>();
    let filename: string | undefined;
    let staging: Promise<StagedFile> | undefined;
    try {
      await readMultipart(req, boundary, {
        field: (name, value) => fields.set(name, value),
        file: (name, given) => {
          // Only the first `file` part is kept; anything else is read and dropped.
          if (name !== 'file' || staging !== undefined) return undefined;
          // A purpose already refused (the Python client sends it first) spares the disk the bytes.
          const purpose = fields.get('purpose');
          if (purpose !== undefined && !isPurpose(purpose)) return undefined;
          filename = given;
          const bytes = new PassThrough();
          staging = this.store.stage(bytes, this.maxBytes);
          // Awaited below, once the body is read; until then a refusal must not go unhandled.
          staging.catch(() => undefined);
          return bytes;
        },
      });
    } catch (err) {
      // A staging that failed has dropped its bytes already; one that finished drops them now.
      void staging?.then(
        (s) => s.discard(),
        () => undefined,
      );
      if (err instanceof MultipartError) return sendError(res, 'invalid_multipart', `The multipart body is malformed: ${err.message}.`);
      // The client went away mid-upload: there is nobody to answer.
      if (req.destroyed || req.readableAborted) return;
      throw err;
    }

    let staged: StagedFile | undefined;
    try {
      staged = staging === undefined ? undefined : await staging;
    } catch (err) {
      if (err instanceof FileTooLargeError) return sendError(res, 'file_too_large', tooLargeMessage(this.maxBytes));
      throw err;
    }
    const refusal = refusalOf(staged, fields.get('purpose'));
    if (refusal !== undefined || staged === undefined) {
      await staged?.discard();
      const [kind, message] = refusal ?? ['missing_file', ''];
      return sendError(res, kind, message);
    }
    const meta: StoredFile = {
      id: newFileId(),
      bytes: staged.bytes,
      createdAt: Math.floor(Date.now() / 1000),
      filename: filename ?? 'upload',
      purpose: fields.get('purpose') as UploadPurpose,
      owner: key?.id ?? null,
    };
    await staged.commit(meta);
    sendJson(res, fileObject(meta));
  }

  private async list(res: ServerResponse, query: URLSearchParams, key: ApiKey | undefined): Promise<void> {
    const purpose = query.get('purpose');
    const order = query.get('order') ?? 'desc';
    if (order !== 'asc' && order !== 'desc') return sendError(res, 'invalid_parameter', `order must be asc or desc, not '${order}'.`);
    const limitText = query.get('limit');
    const limit = limitText === null ? MAX_LIST_LIMIT : Number(limitText);
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT)
      return sendError(res, 'invalid_parameter', `limit must be a whole number from 1 to ${MAX_LIST_LIMIT}.`);
    const files = (await this.store.list())
      .filter((f) => ownedBy(f, key) && (purpose === null || f.purpose === purpose))
      .sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    if (order === 'desc') files.reverse();
    const after = query.get('after');
    const start = after === null ? 0 : files.findIndex((f) => f.id === after) + 1;
    const page = files.slice(start, start + limit);
    sendJson(res, {
      object: 'list',
      data: page.map(fileObject),
      first_id: page[0]?.id ?? null,
      last_id: page.at(-1)?.id ?? null,
      has_more: start + limit < files.length,
    });
  }

  private async retrieve(res: ServerResponse, id: string, key: ApiKey | undefined): Promise<void> {
    const file = await this.owned(id, key);
    if (file === undefined) return notFound(res, id);
    sendJson(res, fileObject(file));
  }

  private async remove(res: ServerResponse, id: string, key: ApiKey | undefined): Promise<void> {
    const file = await this.owned(id, key);
    if (file === undefined || !(await this.store.delete(id))) return notFound(res, id);
    sendJson(res, { id, object: 'file', deleted: true });
  }

  private async content(res: ServerResponse, id: string, key: ApiKey | undefined): Promise<void> {
    const file = await this.owned(id, key);
    const bytes: Readable | undefined = file === undefined ? undefined : await this.store.open(id);
    if (file === undefined || bytes === undefined) return notFound(res, id);
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': file.bytes });
    // Headers are out: a store that fails now can only cut the answer short, which the length shows.
    await pipeline(bytes, res).catch((err: unknown) => {
      if (!res.destroyed) this.log(`router: files: reading ${id} from ${this.store.location} failed: ${(err as Error).message}`);
      res.destroy();
    });
  }

  /** The file, if it exists and `key` may see it. */
  private async owned(id: string, key: ApiKey | undefined): Promise<StoredFile | undefined> {
    const file = await this.store.stat(id);
    return file !== undefined && ownedBy(file, key) ? file : undefined;
  }
}

/**
 * With keys, a file is its uploader's alone (by the key's id, which survives the key's rotation
 * when the keys file names it); without keys every file is everyone's.
 */
function ownedBy(file: StoredFile, key: ApiKey | undefined): boolean {
  // A batch's chunk files and line index are its scratch, nobody's to list or read, keys or none.
  if (file.owner !== null && isChunkOwner(file.owner)) return false;
  return key === undefined || file.owner === key.id;
}

function notFound(res: ServerResponse, id: string): void {
  sendError(res, 'file_not_found', `No such File object: ${id}`);
}

function tooLargeMessage(maxBytes: number): string {
  return `The file is larger than this router accepts (${maxBytes} bytes; --files-max-bytes).`;
}

/** Why a complete upload is refused, or undefined when it is accepted. */
function refusalOf(
  staged: StagedFile | undefined,
  purpose: string | undefined,
): ['missing_file' | 'missing_purpose' | 'invalid_purpose', string] | undefined {
  if (purpose !== undefined && !isPurpose(purpose))
    return [
      'invalid_purpose',
      `'${purpose.slice(0, 64)}' is not one of ${JSON.stringify(UPLOAD_PURPOSES)} - 'purpose': this router takes files for the Batch API only.`,
    ];
  if (staged === undefined) return ['missing_file', 'Missing required parameter: `file` (a multipart part with a filename).'];
  if (purpose === undefined) return ['missing_purpose', "Missing required parameter: 'purpose'."];
  return undefined;
}

function isPurpose(purpose: string): purpose is UploadPurpose {
  return (UPLOAD_PURPOSES as readonly string[]).includes(purpose);
}
