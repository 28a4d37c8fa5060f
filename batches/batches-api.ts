// OpenAI's Batch API on the router: create, retrieve, list and cancel batches, each a `batch`
// workflow (workflows/batch/) whose id is the batch's id. Router side: http/core.ts
// authenticates the request and hands it here; a batch belongs to the key that created it, and
// another key is answered as if it did not exist. The router reads a running batch's query and
// a closed one's memo; it never holds a batch's state itself.
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Client } from '@temporalio/client';
import type { ApiKey } from '../router/http/auth.js';
import { sendError, sendParamError } from '../router/http/errors.js';
import { CONTROL_TASK_QUEUE, WorkflowType } from '../common/names.js';
import { batchStatusQuery, cancelBatchSignal } from '../workflows/definitions.js';
import type { BatchInput } from '../workflows/batch/state.js';
import { listBatchViews } from './batch-list.js';
import { grantFileId, isBatchId, type BatchScope } from './batch-lines.js';
import { writeBatchGrant } from './batch-grant.js';
import { parseCreateBatch } from './batch-create.js';
import type { KeyScope } from '../router/http/key-scope.js';
import { BATCH_MEMO, batchObject, isFinal, newBatchView, type BatchView } from './batch-view.js';
import type { FileStore } from './file-store.js';

export const PATH_BATCHES = '/v1/batches';

/** What /v1/batches answers when the router cannot start workflows or has no file store. */
export const BATCHES_NOT_CONFIGURED =
  'The Batch API is off on this router: it needs routes from Temporal (not --static-routes; a single router process, not --workers) and a file store (--files-dir DIR or --files-s3 s3://BUCKET/PREFIX); the control worker needs LLMGW_FILES_DIR or LLMGW_FILES_S3, LLMGW_ROUTER_URL and LLMGW_BATCH_API_KEY_FILE.';

const MAX_BODY = 64 * 1024;
/** OpenAI's listing page: 20 by default, at most 100. */
const DEFAULT_LIMIT = 20;
const MAX_LIMIT = 100;
/** A running batch's query waits this long for the control worker before its memo is answered instead. */
const QUERY_WAIT_MS = 3000;

export interface BatchesSettings {
  client: () => Promise<Client>;
  store: FileStore;
  /** Where the control worker polls; `llmgw` but in tests. */
  taskQueue?: string;
  /** Smaller chunks and runs, for tests. */
  tuning?: BatchInput['tuning'];
}

/** Serves a request under /v1/batches, already authenticated. Without `api`, answers what to set. */
export function serveBatches(api: BatchesApi | undefined, req: IncomingMessage, res: ServerResponse, key: ApiKey | undefined): void {
  if (api === undefined) return sendError(res, 'batches_not_configured', BATCHES_NOT_CONFIGURED);
  api.serve(req, res, key).catch((err: unknown) => {
    api.log(`router: batches: ${(err as Error).message}`);
    sendError(res, 'internal', 'The batch service failed; try again later.');
  });
}

export class BatchesApi {
  constructor(
    private readonly settings: BatchesSettings,
    readonly log: (line: string) => void,
  ) {}

  async serve(req: IncomingMessage, res: ServerResponse, key: ApiKey | undefined): Promise<void> {
    const raw = req.url ?? '/';
    const q = raw.indexOf('?');
    const path = q < 0 ? raw : raw.slice(0, q);
    const query = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
    const rest = path.slice(PATH_BATCHES.length).split('/');
    const method = req.method ?? 'GET';
    if (rest.length === 1) {
      if (method === 'POST') return this.create(req, res, key);
      if (method === 'GET') return this.list(res, query, key);
      return sendError(res, 'method_not_allowed', `${method} is not allowed on ${PATH_BATCHES}; use GET or POST`);
    }
    const id = rest[1] ?? '';
    if (rest.length === 2 && method === 'GET') return this.retrieve(res, id, key);
    if (rest.length === 3 && rest[2] === 'cancel' && method === 'POST') return this.cancel(res, id, key);
    return sendError(res, 'unknown_path', `No route for ${method} ${path}`);
  }

  private async create(req: IncomingMessage, res: ServerResponse, key: ApiKey | undefined): Promise<void> {
    const body = await readJson(req);
    if (body === undefined) return sendError(res, 'invalid_json', `The body must be a JSON object of at most ${MAX_BODY} bytes.`);
    const checked = parseCreateBatch(body);
    if ('refusal' in checked) return sendParamError(res, checked.refusal.code, checked.refusal.param, checked.refusal.message);
    const { input_file_id: fileId, endpoint, completion_window: windowSeconds, metadata } = checked.body;
    const file = await this.settings.store.stat(fileId);
    if (file === undefined || (key !== undefined && file.owner !== key.id))
      return sendError(res, 'file_not_found', `No such File object: ${fileId}`);
    if (file.purpose !== 'batch')
      return sendParamError(
        res,
        'invalid_value',
        'input_file_id',
        `File ${fileId} has purpose '${file.purpose}'; a batch's input must be a file uploaded with purpose 'batch'.`,
      );
    const input: BatchInput = {
      batchId: `batch_${randomBytes(12).toString('hex')}`,
      inputFileId: fileId,
      endpoint,
      completionWindowSeconds: windowSeconds,
      owner: key?.id ?? null,
      // Its model names only, never the key: validation refuses a line for a model the key may not use.
      ...(key?.scope ? { scope: plainScope(key.scope) } : {}),
      metadata: metadata ?? null,
      createdAt: Math.floor(Date.now() / 1000),
      ...(this.settings.tuning ? { tuning: this.settings.tuning } : {}),
    };
    const view = newBatchView(input);
    const client = await this.settings.client();
    // What the workflow's activities will act on, in the store a namespace member cannot write:
    // a `batch` workflow started by anyone else finds no grant, or one that says otherwise.
    await writeBatchGrant(this.settings.store, {
      batchId: input.batchId,
      inputFileId: input.inputFileId,
      endpoint: input.endpoint,
      owner: input.owner,
      scope: input.scope ?? null,
      createdAt: input.createdAt,
      expiresAt: view.expiresAt,
    });
    // The memo the workflow will keep up to date, there from the start: listed before its first step.
    await client.workflow
      .start(WorkflowType.batch, {
        taskQueue: this.settings.taskQueue ?? CONTROL_TASK_QUEUE,
        workflowId: input.batchId,
        args: [input],
        memo: { [BATCH_MEMO]: view },
        staticSummary: `batch of ${fileId} to ${endpoint}`,
      })
      .catch(async (err: unknown) => {
        await this.settings.store.delete(grantFileId(input.batchId)).catch(() => undefined);
        throw err;
      });
    sendJson(res, batchObject(view));
  }

  private async retrieve(res: ServerResponse, id: string, key: ApiKey | undefined): Promise<void> {
    const view = await this.view(id, key);
    if (view === undefined) return notFound(res, id);
    sendJson(res, batchObject(view));
  }

  private async cancel(res: ServerResponse, id: string, key: ApiKey | undefined): Promise<void> {
    const view = await this.view(id, key);
    if (view === undefined) return notFound(res, id);
    if (isFinal(view.status) || view.status === 'cancelling') return sendJson(res, batchObject(view));
    if (view.status === 'finalizing')
      return sendError(res, 'invalid_parameter', `Batch ${id} is finalizing and can no longer be cancelled.`);
    const client = await this.settings.client();
    await client.workflow.getHandle(id).signal(cancelBatchSignal, { by: key?.id ?? 'anonymous' });
    // The workflow says `cancelling` at its next task; answered now as OpenAI does.
    sendJson(res, batchObject({ ...view, status: 'cancelling', cancellingAt: Math.floor(Date.now() / 1000) }));
  }

  private async list(res: ServerResponse, query: URLSearchParams, key: ApiKey | undefined): Promise<void> {
    const limitText = query.get('limit');
    const limit = limitText === null ? DEFAULT_LIMIT : Number(limitText);
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT)
      return sendError(res, 'invalid_parameter', `limit must be a whole number from 1 to ${MAX_LIMIT}.`);
    const after = query.get('after');
    const views = await listBatchViews(await this.settings.client(), (v) => ownedBy(v, key));
    const start = after === null ? 0 : views.findIndex((v) => v.id === after) + 1;
    const page = views.slice(start, start + limit);
    sendJson(res, {
      object: 'list',
      data: page.map(batchObject),
      first_id: page[0]?.id ?? null,
      last_id: page.at(-1)?.id ?? null,
      has_more: start + limit < views.length,
    });
  }

  /** The batch as its workflow sees it (its query while it runs, its memo once closed), if `key` may see it. */
  private async view(id: string, key: ApiKey | undefined): Promise<BatchView | undefined> {
    if (!isBatchId(id)) return undefined;
    const handle = (await this.settings.client()).workflow.getHandle(id);
    const described = await handle.describe().catch((err: unknown) => {
      if ((err as Error).name === 'WorkflowNotFoundError') return undefined;
      throw err;
    });
    if (described === undefined || described.type !== WorkflowType.batch) return undefined;
    const memo = (await described.memo)?.[BATCH_MEMO] as BatchView | undefined;
    if (memo === undefined || !ownedBy(memo, key)) return undefined;
    if (described.status.name !== 'RUNNING') return memo;
    const answered = await Promise.race([
      handle.query(batchStatusQuery).catch(() => undefined),
      new Promise<undefined>((done) => setTimeout(() => done(undefined), QUERY_WAIT_MS).unref()),
    ]);
    return answered ?? memo;
  }
}

function plainScope(scope: KeyScope): BatchScope {
  const list = (names: KeyScope['models']) => (names === 'all' ? 'all' : [...names].sort());
  return { models: list(scope.models), adapters: list(scope.adapters) };
}

function ownedBy(view: BatchView, key: ApiKey | undefined): boolean {
  return key === undefined || view.owner === key.id;
}

function notFound(res: ServerResponse, id: string): void {
  sendError(res, 'batch_not_found', `No such Batch object: ${id}`);
}

function sendJson(res: ServerResponse, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** The request's body as a JSON object, or undefined when it is not one or is too large. */
async function readJson(req: IncomingMessage): Promise<Record<string, unknown> | undefined> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY) return undefined;
    parts.push(chunk);
  }
  try {
    const parsed: unknown = JSON.parse(Buffer.concat(parts).toString('utf8'));
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
