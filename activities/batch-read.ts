// Reading a batch's stored JSONL: its requests (non-blank lines) in a range, with their line
// numbers and byte offsets, from the file's start or from a mark of its line index
// (batches/line-index.ts). Control side; validation, chunks and finalizing all read through it,
// so they agree on what line N is.
import { ApplicationFailure } from '@temporalio/common';
import type { FileStore } from '../batches/file-store.js';
import { isBlankLine } from '../batches/batch-lines.js';
import { splitLines, type LineMark, type SplitLine } from '../batches/line-index.js';

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
