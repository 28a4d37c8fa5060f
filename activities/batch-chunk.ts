// The batch workflow's chunk activity: sends a chunk's lines through the router, a few at a
// time, at the lowest priority (`x-llmgw-priority: sheddable`), and writes their results as one
// chunk file. Control side. The router's URL and the batch key come from the worker's own
// environment; the key is read from its file at each chunk and never leaves this process.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { FileStore } from '../batches/file-store.js';
import {
  batchRequestId,
  checkLine,
  errorLine,
  outputLine,
  type BatchEndpoint,
  type BatchRequest,
  type ChunkPlan,
  type ResultLine,
} from '../batches/batch-lines.js';
import { findLineMark } from '../batches/line-index.js';
import { requireBatchGrant } from '../batches/batch-grant.js';
import { BATCH_NOT_CONFIGURED, requireOwnWorkflow, writeChunkFile } from './batch-files.js';
import { readRequestLines } from './batch-read.js';
import { BATCH_WINDOW_ENDED } from './batch-not-configured.js';

/** Requests of one chunk in flight at once. */
const LINE_CONCURRENCY = 4;
/** How often a running chunk says it is alive, whatever its lines do (its heartbeat timeout is 20 s). */
const HEARTBEAT_EVERY_MS = 5000;
/** How long one line keeps being held back (429/503, router unreachable) before it is an error line. */
const LINE_PATIENCE_MS = 10 * 60 * 1000;
/** Tries of a line the router answers 5xx (other than 503). */
const SERVER_ERROR_TRIES = 3;
/** The longest wait a Retry-After is honoured for at once (the line then asks again). */
const MAX_WAIT_MS = 30_000;

/** How long a chunk refused for its ended window waits to be cancelled by its batch's timer before it fails. */
const WINDOW_END_WAIT_MS = 30_000;

/** What llmgw_batch_lines counts. */
export type BatchLineOutcome = 'completed' | 'failed' | 'retried';

export interface BatchRouterSettings {
  routerUrl: string | undefined;
  keyFile: string | undefined;
}

export function batchRouterFromEnv(env: NodeJS.ProcessEnv = process.env): BatchRouterSettings {
  return { routerUrl: env.LLMGW_ROUTER_URL, keyFile: env.LLMGW_BATCH_API_KEY_FILE };
}

export interface ChunkInput {
  batchId: string;
  inputFileId: string;
  endpoint: BatchEndpoint;
  chunk: ChunkPlan;
}

export function createBatchChunkActivities(
  store: () => Promise<FileStore>,
  settings: BatchRouterSettings,
  count: (outcome: BatchLineOutcome, lines: number) => void = () => undefined,
) {
  return {
    /** Runs one chunk and writes its chunk file: how many lines ended in the output file and how many in the error file. */
    async runBatchChunk(input: ChunkInput): Promise<{ completed: number; failed: number }> {
      if (!settings.routerUrl)
        throw ApplicationFailure.nonRetryable(
          "the control worker has no LLMGW_ROUTER_URL: set it to the router's URL (http://host:port) that batch lines go through, restart the worker and create the batch again",
          BATCH_NOT_CONFIGURED,
        );
      requireOwnWorkflow(input.batchId);
      const files = await store();
      const context = Context.current();
      const requests = await readGrantedChunk(files, input).catch(async (err: unknown) => {
        // Past the window, the batch's own timer is about to stop it and cancel this chunk: wait
        // for that, sending nothing, so that the batch ends expired, not failed by whichever
        // came first. A batch with no such timer (one started by hand) gets the refusal.
        if (err instanceof ApplicationFailure && err.type === BATCH_WINDOW_ENDED) await untilCancelled(context, WINDOW_END_WAIT_MS);
        throw err;
      });
      const key = readKey(settings.keyFile);
      const results: ResultLine[] = new Array<ResultLine>(requests.length);
      let next = 0;
      let done = 0;
      // The endpoint the router granted, which the input was just checked to name.
      const send = { url: `${settings.routerUrl.replace(/\/+$/, '')}${input.endpoint}`, key, batchId: input.batchId };
      // A beat on a clock as well as per line: lines held at the router or generating for minutes
      // would otherwise let the chunk's heartbeat lapse while it is alive and working.
      const beating = setInterval(() => context.heartbeat({ done }), HEARTBEAT_EVERY_MS);
      try {
        await Promise.all(
          Array.from({ length: Math.min(LINE_CONCURRENCY, requests.length) }, async () => {
            while (next < requests.length) {
              const i = next++;
              results[i] = await runLine(send, requests[i] as BatchRequest, context, () => count('retried', 1));
              context.heartbeat({ done: ++done });
            }
          }),
        );
      } finally {
        clearInterval(beating);
      }
      // A chunk cancelled while its last lines ran writes nothing: its batch has moved on without it.
      if (context.cancellationSignal.aborted) throw new Error('the chunk was cancelled');
      await writeChunkFile(files, input.batchId, input.chunk, results);
      const failed = results.filter((r) => r.error !== null).length;
      count('completed', results.length - failed);
      count('failed', failed);
      return { completed: results.length - failed, failed };
    },
  };
}

/**
 * A chunk's requests, for a batch a router granted as its input says (file and endpoint) and
 * whose completion window is not over; read from the grant's file, checked against its endpoint.
 * Before any line is read: a refused chunk reads and sends nothing.
 */
export async function readGrantedChunk(
  files: FileStore,
  input: ChunkInput,
  now: number = Math.floor(Date.now() / 1000),
): Promise<BatchRequest[]> {
  const { inputFileId, endpoint } = input;
  const grant = await requireBatchGrant(files, input.batchId, { inputFileId, endpoint }, now);
  return readChunkRequests(files, { ...input, inputFileId: grant.inputFileId, endpoint: grant.endpoint });
}

/**
 * A chunk's requests, read from the last mark of the batch's line index at or before its first
 * request (so about its own bytes, not the file up to them); from the file's start when the batch
 * has no index.
 */
export async function readChunkRequests(files: FileStore, input: ChunkInput): Promise<BatchRequest[]> {
  const from = await findLineMark(files, input.batchId, input.chunk.start);
  const requests: BatchRequest[] = [];
  const seen = new Set<string>();
  for await (const { text, line } of readRequestLines(files, input.inputFileId, input.chunk.start, input.chunk.end, from)) {
    const checked = checkLine(text, line, input.endpoint, seen);
    // Validation passed these lines already: one that fails now means the file changed under the batch.
    if ('error' in checked)
      throw ApplicationFailure.nonRetryable(`line ${line} of ${input.inputFileId} changed since validation: it ${checked.error}`);
    requests.push(checked);
  }
  return requests;
}

/** Beats until `ms` have passed; a cancel (delivered at a beat) rejects it. */
async function untilCancelled(context: Context, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    context.heartbeat({ windowEnded: true });
    await context.sleep(Math.min(HEARTBEAT_EVERY_MS, Math.max(1, end - Date.now())));
  }
}

function readKey(keyFile: string | undefined): string | undefined {
  if (!keyFile) return undefined;
  try {
    return readFileSync(keyFile, 'utf8').trim();
  } catch (err) {
    throw ApplicationFailure.nonRetryable(
      `the batch key file LLMGW_BATCH_API_KEY_FILE=${keyFile} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'}): fix it, restart the worker and create the batch again`,
      BATCH_NOT_CONFIGURED,
    );
  }
}

/** One line to its result: retried while the router holds it back, an error line when it refuses or keeps failing. */
async function runLine(
  send: { url: string; key: string | undefined; batchId: string },
  req: BatchRequest,
  context: Context,
  retried: () => void,
): Promise<ResultLine> {
  const id = batchRequestId(randomBytes(12));
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'x-llmgw-priority': 'sheddable',
    'x-llmgw-batch-line': `${send.batchId}:${req.line}`,
  };
  if (send.key) headers.authorization = `Bearer ${send.key}`;
  const began = Date.now();
  let serverErrors = 0;
  for (let attempt = 1; ; attempt++) {
    let res: Response;
    try {
      res = await fetch(send.url, { method: 'POST', headers, body: JSON.stringify(req.body), signal: context.cancellationSignal });
    } catch (err) {
      if (context.cancellationSignal.aborted) throw err;
      if (Date.now() - began > LINE_PATIENCE_MS)
        return errorLine(id, req.customId, { code: 'router_unreachable', message: `the router did not answer: ${(err as Error).message}` });
      await context.sleep(backoffMs(attempt));
      retried();
      continue;
    }
    const text = await res.text();
    const body = parseBody(text);
    const requestId =
      res.headers.get('x-request-id') ?? (typeof (body as { id?: unknown })?.id === 'string' ? (body as { id: string }).id : id);
    if (res.ok) return outputLine(id, req.customId, res.status, requestId, body);
    const reason = errorOf(res.status, body, text);
    const response = { statusCode: res.status, requestId, body };
    if (res.status === 429 || res.status === 503) {
      // Held back (interactive traffic first, a replica waking): wait as told, within the line's patience.
      if (Date.now() - began > LINE_PATIENCE_MS) return errorLine(id, req.customId, reason, response);
      await context.sleep(retryAfterMs(res.headers.get('retry-after'), attempt));
      retried();
      continue;
    }
    if (res.status >= 500 && ++serverErrors < SERVER_ERROR_TRIES) {
      await context.sleep(backoffMs(attempt));
      retried();
      continue;
    }
    return errorLine(id, req.customId, reason, response);
  }
}

function parseBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The error an OpenAI-shaped body names, else the status. */
function errorOf(status: number, body: unknown, text: string): { code: string; message: string } {
  const e = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
  const code = typeof e?.code === 'string' ? e.code : `http_${status}`;
  const message = typeof e?.message === 'string' ? e.message : `the request failed with status ${status}: ${text.slice(0, 200)}`;
  return { code, message };
}

/** Exponential from half a second, at most ten. */
function backoffMs(attempt: number): number {
  return Math.min(10_000, 500 * 2 ** Math.min(attempt - 1, 5));
}

/** Retry-After in seconds (as the router sends it), at most MAX_WAIT_MS; the back-off without one. */
export function retryAfterMs(header: string | null, attempt: number): number {
  const seconds = header === null ? NaN : Number(header);
  if (!Number.isFinite(seconds) || seconds < 0) return backoffMs(attempt);
  return Math.min(MAX_WAIT_MS, Math.max(100, seconds * 1000));
}
