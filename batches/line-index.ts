// Byte-aware line splitting for a batch's JSONL files, and the line index that validation writes
// so that each chunk reads only its own part of the input. Control side (the batch activities);
// the index is a hidden file of the batch in the store, owned and removed as its chunk files are.
import { indexFileId } from './batch-lines.js';
import { putBatchFile, type FileStore } from './file-store.js';

/** One line of a file: its text (UTF-8, without its line ending), 1-based number, and the offset of its first byte. */
export interface SplitLine {
  text: string;
  line: number;
  byte: number;
}

/** Where a read starts: the number of lines before it and the offset of its first byte in the file. */
export interface SplitStart {
  linesBefore: number;
  byte: number;
}

const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;

/**
 * Splits bytes into lines on `\n` alone, dropping one `\r` before it (CRLF files), each line decoded
 * as UTF-8 by itself: a `\n` byte never falls inside a multi-byte character, so that is the
 * stream's decoding. readline also ends a line at a lone `\r`; this does not (JSONL ends lines with
 * `\n`, and a JSON line's lone `\r` can only be whitespace), and it knows each line's byte offset,
 * which readline cannot tell. Validation, chunks and finalizing all split with it, so they agree on
 * every line's number.
 */
export async function* splitLines(
  bytes: AsyncIterable<Buffer | string> | Iterable<Buffer | string>,
  start: SplitStart = { linesBefore: 0, byte: 0 },
): AsyncGenerator<SplitLine> {
  let line = start.linesBefore;
  let lineStart = start.byte;
  // A line's pieces from earlier chunks, joined once its end comes (not once per chunk: a long line would be quadratic).
  let pending: Buffer[] = [];
  for await (const chunk of bytes) {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    let from = 0;
    for (let end = buf.indexOf(NEWLINE, from); end !== -1; end = buf.indexOf(NEWLINE, from)) {
      const piece = buf.subarray(from, end);
      const whole = pending.length === 0 ? piece : Buffer.concat([...pending, piece]);
      pending = [];
      yield { text: decodeLine(whole), line: ++line, byte: lineStart };
      lineStart += whole.length + 1;
      from = end + 1;
    }
    if (from < buf.length) pending.push(buf.subarray(from));
  }
  if (pending.length > 0) yield { text: decodeLine(Buffer.concat(pending)), line: line + 1, byte: lineStart };
}

function decodeLine(bytes: Buffer): string {
  const end = bytes.length > 0 && bytes[bytes.length - 1] === CARRIAGE_RETURN ? bytes.length - 1 : bytes.length;
  return bytes.toString('utf8', 0, end);
}

/**
 * Every this many requests validation notes where one starts. A constant, not the chunk size
 * (validation does not know it): a chunk reads at most this many requests before its own, and the
 * index of a million-request file is some 4,000 records (200 KB).
 */
export const INDEX_EVERY = 256;

/** Where request `request` (0-based among non-blank lines) is: its 1-based line and the byte its line starts at. */
export interface LineMark {
  request: number;
  line: number;
  byte: number;
}

/**
 * The index is fixed-width text, so that a chunk reads the one record it needs by its offset (a
 * ranged read) rather than the whole index: a header record naming the spacing, then record k
 * for request k × every, each `request line byte` in 16 digits and a newline.
 */
const DIGITS = 16;
const RECORD_BYTES = 3 * DIGITS + 3;
const HEADER = 'llmgw line index 1 every ';
const RECORD = new RegExp(`^(\\d{${DIGITS}}) (\\d{${DIGITS}}) (\\d{${DIGITS}})\\n$`);
const HEADER_RECORD = new RegExp(`^${HEADER}(\\d{${DIGITS}}) *\\n$`);

function digits(n: number): string {
  return String(n).padStart(DIGITS, '0');
}

/** The index's bytes: `marks` must be requests 0, every, 2 × every, … in order. */
export function encodeLineIndex(marks: readonly LineMark[], every = INDEX_EVERY): Buffer {
  const header = `${HEADER}${digits(every)}`.padEnd(RECORD_BYTES - 1) + '\n';
  return Buffer.from(header + marks.map((m) => `${digits(m.request)} ${digits(m.line)} ${digits(m.byte)}\n`).join(''), 'latin1');
}

/** Writes a batch's index whole, staged and renamed over any earlier try's (a retried validation writes the same file). */
export async function writeLineIndex(files: FileStore, batchId: string, marks: readonly LineMark[], every = INDEX_EVERY): Promise<void> {
  await putBatchFile(files, batchId, indexFileId(batchId), `${batchId}_index.txt`, encodeLineIndex(marks, every));
}

/**
 * The last indexed request at or before `request`, read from the batch's index by two ranged
 * reads; undefined when there is no index (a batch validated before there were any), it does not
 * hold that record, or the nearest mark is request 0 (reading from the start is the same).
 */
export async function findLineMark(files: FileStore, batchId: string, request: number): Promise<LineMark | undefined> {
  const id = indexFileId(batchId);
  const header = HEADER_RECORD.exec((await readRecord(files, id, 0)) ?? '');
  const every = header ? Number(header[1]) : 0;
  if (every < 1) return undefined;
  const k = Math.floor(request / every);
  if (k === 0) return undefined;
  const record = RECORD.exec((await readRecord(files, id, (k + 1) * RECORD_BYTES)) ?? '');
  if (record === null || Number(record[1]) !== k * every) return undefined;
  return { request: Number(record[1]), line: Number(record[2]), byte: Number(record[3]) };
}

/** RECORD_BYTES from `offset` of a stored file, or undefined when the file or that many bytes are not there. */
async function readRecord(files: FileStore, id: string, offset: number): Promise<string | undefined> {
  const stream = await files.open(id, offset);
  if (stream === undefined) return undefined;
  const parts: Buffer[] = [];
  let got = 0;
  try {
    for await (const part of stream as AsyncIterable<Buffer>) {
      parts.push(part);
      got += part.length;
      if (got >= RECORD_BYTES) break;
    }
  } finally {
    stream.destroy();
  }
  return got >= RECORD_BYTES ? Buffer.concat(parts).subarray(0, RECORD_BYTES).toString('latin1') : undefined;
}
