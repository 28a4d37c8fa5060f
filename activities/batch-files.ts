// The batch workflow's activities that read and write the file store: validating a batch's input
// (and writing its line index, batches/line-index.ts), writing one chunk's results whole, and
// merging the chunk files into the batch's output and error files (with, for a cancelled or
// expired batch, a line for each request it never ran, read from the input file). Control side;
// the bytes go from the store to the store, never through Temporal.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { DirectoryFileStore, type FileStore } from '../batches/file-store.js';
import { S3FileStore } from '../batches/s3-file-store.js';
import {
  batchRequestId,
  checkLine,
  countedRequests,
  unrunLine,
  type BatchStopReason,
  chunkFileId,
  chunkOwner,
  errorFileId,
  grantFileId,
  indexFileId,
  isBlankLine,
  scopeAllows,
  type BatchScope,
  outputFileId,
  type BatchEndpoint,
  type BatchLineError,
  type BatchRequest,
  type ChunkPlan,
  type ResultLine,
} from '../batches/batch-lines.js';
import { INDEX_EVERY, splitLines, writeLineIndex, type LineMark, type SplitLine } from '../batches/line-index.js';
import { notGranted, readBatchGrant, requireBatchGrant } from '../batches/batch-grant.js';

export { BATCH_NOT_CONFIGURED } from './batch-not-configured.js';
import { BATCH_NOT_CONFIGURED } from './batch-not-configured.js';
/** At most this many bad lines are reported (OpenAI's errors list is for reading, not for every line). */
const MAX_REPORTED_ERRORS = 10;
const NO_LIMIT = Number.MAX_SAFE_INTEGER;
/** Unrun lines listed between heartbeats (the SDK throttles them; this only bounds the calls). */
const HEARTBEAT_EVERY_LINES = 1000;

/** The control worker's file store, from LLMGW_FILES_DIR or LLMGW_FILES_S3 (the router's --files-dir / --files-s3). */
export function fileStoreFromEnv(env: NodeJS.ProcessEnv = process.env): () => Promise<FileStore> {
  let store: Promise<FileStore> | undefined;
  return () => {
    if (env.LLMGW_FILES_DIR) store ??= DirectoryFileStore.open(env.LLMGW_FILES_DIR);
    else if (env.LLMGW_FILES_S3) store ??= Promise.resolve(new S3FileStore(env.LLMGW_FILES_S3));
    else
      throw ApplicationFailure.nonRetryable(
        'the control worker has no file store: set LLMGW_FILES_DIR (or LLMGW_FILES_S3) to the store the router was given with --files-dir (--files-s3), restart the worker and create the batch again',
        BATCH_NOT_CONFIGURED,
      );
    return store;
  };
}

/**
 * The non-blank lines, requests [start, end), of a stored file with their 1-based line numbers
 * and the byte each line starts at. `from`, a mark of the batch's line index at or before
 * `start`, starts the read at that request's line instead of the file's first byte.
 */
export async function* readRequestLines(
  store: FileStore,
  fileId: string,
  start = 0,
  end = Infinity,
  from?: LineMark,
): AsyncGenerator<SplitLine> {
  const bytes = await store.open(fileId, from?.byte ?? 0);
  if (bytes === undefined) throw ApplicationFailure.nonRetryable(`the input file ${fileId} is no longer in the store at ${store.location}`);
  let index = from?.request ?? 0;
  try {
    for await (const read of splitLines(bytes as AsyncIterable<Buffer>, { linesBefore: (from?.line ?? 1) - 1, byte: from?.byte ?? 0 })) {
      if (isBlankLine(read.text)) continue;
      if (index >= end) break;
      if (index++ >= start) yield read;
    }
  } finally {
    bytes.destroy();
  }
}

export type ValidateResult = { ok: true; total: number } | { ok: false; errors: BatchLineError[] };

export function createBatchFileActivities(store: () => Promise<FileStore>) {
  return {
    /** Every line checked before any runs: the count of requests, or the first bad lines by number. */
    async validateBatchInput(input: ValidateInput): Promise<ValidateResult> {
      requireOwnWorkflow(input.batchId);
      return validateFiles(await store(), input, (details) => Context.current().heartbeat(details));
    },

    /**
     * Writes the batch's output and error files from its chunk files (in chunk order), then
     * removes every chunk file it may have written. Idempotent: the files' ids come from the
     * batch's, so a retry writes the same files whole again.
     */
    async finalizeBatch(input: FinalizeInput): Promise<{ outputFileId: string | null; errorFileId: string | null }> {
      requireOwnWorkflow(input.batchId);
      return finalizeFiles(await store(), input, (details) => Context.current().heartbeat(details));
    },
  };
}

/**
 * A batch's activities act only for the workflow whose id is the batch's, as the router starts
 * it: while it runs no other workflow can take that id, so a second workflow naming a live
 * batch (its owner and file copied from a history) cannot run that batch's lines again.
 */
export function requireOwnWorkflow(batchId: string): void {
  const workflowId = Context.current().info.workflowExecution?.workflowId;
  if (workflowId !== batchId)
    throw notGranted(batchId, `it is granted to workflow ${batchId}, not ${workflowId ?? 'an activity outside any workflow'}`);
}

export interface ValidateInput {
  batchId: string;
  inputFileId: string;
  endpoint: BatchEndpoint;
  owner: string | null;
  scope?: BatchScope;
}

/**
 * validateBatchInput's work, with its heartbeat passed in. A valid input also gets its line
 * index (batches/line-index.ts), noted while the lines go by, so that no chunk rereads the file
 * up to its own lines. Only a batch a router granted is read, and only as granted: the input's
 * owner, scope, file and endpoint must be the grant's, and its completion window not over.
 */
export async function validateFiles(
  files: FileStore,
  claimed: ValidateInput,
  beat: (details: unknown) => void,
  now: number = Math.floor(Date.now() / 1000),
): Promise<ValidateResult> {
  const { inputFileId, endpoint, owner, scope } = claimed;
  const grant = await requireBatchGrant(files, claimed.batchId, { inputFileId, endpoint, owner, scope: scope ?? null }, now);
  const input = { ...grant, scope: grant.scope ?? undefined };
  const meta = await files.stat(input.inputFileId);
  if (meta === undefined || (input.owner !== null && meta.owner !== input.owner))
    return {
      ok: false,
      errors: [{ code: 'file_not_found', message: `No such File object: ${input.inputFileId}`, line: null, param: 'input_file_id' }],
    };
  const seen = new Set<string>();
  const errors: BatchLineError[] = [];
  const marks: LineMark[] = [];
  let request = 0;
  for await (const { text, line, byte } of readRequestLines(files, input.inputFileId)) {
    if (request % INDEX_EVERY === 0) marks.push({ request, line, byte });
    request++;
    const checked = checkLine(text, line, input.endpoint, seen);
    if ('error' in checked) errors.push({ code: 'invalid_request', message: `Line ${line} ${checked.error}.`, line, param: null });
    else if (!scopeAllows(input.scope, checked.body.model as string))
      errors.push({
        code: 'model_not_allowed',
        message: `Line ${line} asks for model '${String(checked.body.model).slice(0, 64)}', which the key that created this batch may not use (name it as the key's scope does).`,
        line,
        param: null,
      });
    if (errors.length >= MAX_REPORTED_ERRORS) break;
    if (seen.size % 10_000 === 0) beat({ lines: line });
  }
  if (errors.length > 0) return { ok: false, errors };
  if (seen.size === 0)
    return {
      ok: false,
      errors: [{ code: 'empty_file', message: 'The input file holds no requests.', line: null, param: 'input_file_id' }],
    };
  await writeLineIndex(files, input.batchId, marks);
  return { ok: true, total: seen.size };
}

export interface FinalizeInput {
  batchId: string;
  owner: string | null;
  chunks: number[];
  /** How many chunks were ever started: the chunk files to remove (a cancelled chunk may have left one). */
  started: number;
  /**
   * Set when a cancel or the window stopped the batch: each request outside `chunks` (as
   * planChunks(total, chunkSize) cut them) is read from the input file and listed in the error
   * file with `batch_cancelled` / `batch_expired`, as OpenAI lists them. Absent: only what ran.
   */
  stopped?: { why: BatchStopReason; inputFileId: string; total: number; chunkSize: number };
}

/**
 * finalizeBatch's work, with its heartbeat passed in (tests call it outside an activity). It
 * writes only for a batch a router granted, owned by the grant's owner, and works after the
 * grant's window too (an expired batch finalizes then); the grant is removed last.
 */
export async function finalizeFiles(
  files: FileStore,
  claimed: FinalizeInput,
  beat: (details: unknown) => void,
): Promise<{ outputFileId: string | null; errorFileId: string | null }> {
  const now = Math.floor(Date.now() / 1000);
  const [out, err] = [outputFileId(claimed.batchId), errorFileId(claimed.batchId)];
  const written = async () => ({ outputFileId: (await files.stat(out)) ? out : null, errorFileId: (await files.stat(err)) ? err : null });
  // A try that wrote both files and removed the chunk files, whose answer was lost: done already.
  // Answered without the grant (that try may have removed it too), and only by reading.
  const first = claimed.chunks[0];
  if (first !== undefined && (await files.stat(chunkFileId(claimed.batchId, first))) === undefined) {
    const grant = await readBatchGrant(files, claimed.batchId);
    if (grant !== undefined && grant.owner === claimed.owner) await files.delete(grantFileId(claimed.batchId));
    return written();
  }
  if (claimed.chunks.length === 0 && (await readBatchGrant(files, claimed.batchId)) === undefined) {
    // No chunk was counted, so no chunk file tells a finished try apart: the files it wrote do.
    const done = await written();
    if (done.outputFileId !== null || done.errorFileId !== null) return done;
  }
  const claims = { owner: claimed.owner, ...(claimed.stopped ? { inputFileId: claimed.stopped.inputFileId } : {}) };
  const grant = await requireBatchGrant(files, claimed.batchId, claims);
  const input: FinalizeInput = {
    ...claimed,
    owner: grant.owner,
    ...(claimed.stopped ? { stopped: { ...claimed.stopped, inputFileId: grant.inputFileId } } : {}),
  };
  const chunkLines = async function* (keep: (l: ResultLine) => boolean): AsyncGenerator<string> {
    // In chunk order, which is input order; the workflow lists them as they completed.
    for (const chunk of [...input.chunks].sort((a, b) => a - b)) {
      for await (const { text } of readRequestLines(files, chunkFileId(input.batchId, chunk))) {
        if (keep(JSON.parse(text) as ResultLine)) yield `${text}\n`;
      }
      beat({ chunk });
    }
  };
  const write = async (id: string, lines: AsyncIterable<string>): Promise<string | null> => {
    let count = 0;
    const counted = async function* (): AsyncGenerator<string> {
      for await (const line of lines) {
        count++;
        yield line;
      }
    };
    const staged = await files.stage(Readable.from(counted()), NO_LIMIT);
    if (count === 0) {
      await staged.discard();
      await files.delete(id);
      return null;
    }
    const name = id === outputFileId(input.batchId) ? 'output' : 'errors';
    await staged.commit({
      id,
      bytes: staged.bytes,
      createdAt: now,
      filename: `${input.batchId}_${name}.jsonl`,
      purpose: 'batch_output',
      owner: input.owner,
    });
    return id;
  };
  const errorLines = async function* (): AsyncGenerator<string> {
    yield* chunkLines((l) => l.error !== null);
    if (input.stopped !== undefined) yield* unrunLines(files, input.stopped, input.chunks, beat);
  };
  const output = await write(
    outputFileId(input.batchId),
    chunkLines((l) => l.error === null),
  );
  const errors = await write(errorFileId(input.batchId), errorLines());
  // The index, then the chunk file a retry looks for (input.chunks[0]), before any other: a retry
  // that finds it gone returns at once, and one that finds it has every chunk file to merge again.
  await files.delete(indexFileId(input.batchId));
  if (first !== undefined) await files.delete(chunkFileId(input.batchId, first));
  for (let chunk = 0; chunk < input.started; chunk++) if (chunk !== first) await files.delete(chunkFileId(input.batchId, chunk));
  // Last: until here a retry must find the grant to write again.
  await files.delete(grantFileId(input.batchId));
  return { outputFileId: output, errorFileId: errors };
}

/**
 * The error lines of the requests a stopped batch never counted, in input order, read from its
 * input file one line at a time. An input file deleted since (its owner may) leaves them out
 * rather than failing the batch's finalizing: its custom_ids are nowhere left to read.
 */
async function* unrunLines(
  files: FileStore,
  stopped: NonNullable<FinalizeInput['stopped']>,
  doneChunks: number[],
  beat: (details: unknown) => void,
): AsyncGenerator<string> {
  if ((await files.stat(stopped.inputFileId)) === undefined) return;
  const counted = countedRequests(stopped.total, stopped.chunkSize, doneChunks);
  let request = 0;
  for await (const { text, line } of readRequestLines(files, stopped.inputFileId, 0, stopped.total)) {
    if (!counted(request++)) {
      const customId = (JSON.parse(text) as { custom_id: string }).custom_id;
      yield `${JSON.stringify(unrunLine(batchRequestId(randomBytes(12)), customId, stopped.why))}\n`;
    }
    if (request % HEARTBEAT_EVERY_LINES === 0) beat({ line });
  }
}

/** One chunk's results, written whole under a staging name and renamed over any earlier try's file. */
export async function writeChunkFile(files: FileStore, batchId: string, chunk: ChunkPlan, lines: ResultLine[]): Promise<void> {
  const text = lines.map((l) => `${JSON.stringify(l)}\n`).join('');
  const staged = await files.stage(Readable.from([Buffer.from(text)]), NO_LIMIT);
  await staged.commit({
    id: chunkFileId(batchId, chunk.index),
    bytes: staged.bytes,
    createdAt: Math.floor(Date.now() / 1000),
    filename: `${batchId}_chunk${chunk.index}.jsonl`,
    purpose: 'batch',
    owner: chunkOwner(batchId),
  });
}

export type { BatchRequest };
