// A batch's finalizing, on the file store: its chunk files merged, in input order, into the
// batch's output and error files (with, for a cancelled or expired batch, a line for each request
// it never ran, read from the input file), owned by its grant's owner, then the chunk files, the
// line index and the grant removed. Control side; activities/batch-files.ts runs it as
// finalizeBatch.
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { FileStore } from '../batches/file-store.js';
import {
  batchRequestId,
  countedRequests,
  unrunLine,
  type BatchStopReason,
  chunkFileId,
  errorFileId,
  grantFileId,
  indexFileId,
  outputFileId,
  type ResultLine,
} from '../batches/batch-lines.js';
import { readBatchGrant, requireBatchGrant } from '../batches/batch-grant.js';
import { readRequestLines } from './batch-read.js';

const NO_LIMIT = Number.MAX_SAFE_INTEGER;
/** Unrun lines listed between heartbeats (the SDK throttles them; this only bounds the calls). */
const HEARTBEAT_EVERY_LINES = 1000;

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
