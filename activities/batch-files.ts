// The batch workflow's activities that read and write the file store: validating a batch's input
// (and writing its line index, batches/line-index.ts), writing one chunk's results whole, and
// finalizing (activities/batch-finalize.ts: the chunk files merged into the output and error
// files). Control side; the bytes go from the store to the store, never through Temporal.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { DirectoryFileStore, putBatchFile, type FileStore } from '../batches/file-store.js';
import { S3FileStore } from '../batches/s3-file-store.js';
import {
  checkLine,
  chunkFileId,
  scopeAllows,
  type BatchScope,
  type BatchEndpoint,
  type BatchLineError,
  type BatchRequest,
  type ChunkPlan,
  type ResultLine,
} from '../batches/batch-lines.js';
import { INDEX_EVERY, writeLineIndex, type LineMark } from '../batches/line-index.js';
import { readRequestLines } from './batch-read.js';
import { notGranted, requireBatchGrant } from '../batches/batch-grant.js';

export { BATCH_NOT_CONFIGURED } from './batch-not-configured.js';
import { finalizeFiles, type FinalizeInput } from './batch-finalize.js';
export { finalizeFiles, type FinalizeInput } from './batch-finalize.js';
import { BATCH_NOT_CONFIGURED } from './batch-not-configured.js';
/** At most this many bad lines are reported (OpenAI's errors list is for reading, not for every line). */
const MAX_REPORTED_ERRORS = 10;

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

/** One chunk's results, written whole under a staging name and renamed over any earlier try's file. */
export async function writeChunkFile(files: FileStore, batchId: string, chunk: ChunkPlan, lines: ResultLine[]): Promise<void> {
  const text = lines.map((l) => `${JSON.stringify(l)}\n`).join('');
  await putBatchFile(files, batchId, chunkFileId(batchId, chunk.index), `${batchId}_chunk${chunk.index}.jsonl`, Buffer.from(text));
}

export type { BatchRequest };
