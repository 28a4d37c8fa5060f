// A batch's line index on a real directory store, outside Temporal: validation writes it, a chunk
// deep in a 50,000-request input reads about its own bytes (counted through a wrapping store) and
// gets exactly the lines, numbers and offsets a full read gets (CRLF lines, blank lines, multi-byte
// UTF-8, a lone \r), a batch without an index reads from the start, and finalizing removes it.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { DirectoryFileStore, putFile, type FileStore } from '../../batches/file-store.js';
import { chunkOwner, indexFileId, planChunks } from '../../batches/batch-lines.js';
import { findLineMark, INDEX_EVERY, splitLines, type SplitLine } from '../../batches/line-index.js';
import { finalizeFiles, validateFiles } from '../../activities/batch-files.js';
import { readRequestLines } from '../../activities/batch-read.js';
import { readChunkRequests } from '../../activities/batch-chunk.js';
import { grantBatch } from '../helpers/batch-grants.js';

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

const BATCH = `batch_${'ef'.repeat(12)}`;
const INPUT = 'file-bigInput';
const REQUESTS = 50_000;
const noBeat = () => undefined;

/**
 * A 50,000-request input as files come: every 7th line ends CRLF, a blank line (empty, spaces, a
 * lone CR) after every 13th request, multi-byte characters in the bodies, and every 500th line
 * with a lone \r inside it as JSON whitespace (one line here; readline made it two). With the
 * lines a reader must yield: their text, 1-based number and the byte each starts at.
 */
function bigInput(): { bytes: Buffer; expected: SplitLine[] } {
  const parts: string[] = [];
  const expected: SplitLine[] = [];
  let line = 0;
  let byte = 0;
  const push = (text: string, ending: string, counted: boolean) => {
    line++;
    if (counted) expected.push({ text, line, byte });
    parts.push(text + ending);
    byte += Buffer.byteLength(text + ending);
  };
  for (let i = 0; i < REQUESTS; i++) {
    const body = { model: 'm', input: `q${i} ${'é日本🙂'.repeat(i % 5)} ${'x'.repeat(i % 90)}` };
    let text = JSON.stringify({ custom_id: `req-${i}`, method: 'POST', url: '/v1/embeddings', body });
    if (i % 500 === 250) text = text.replace(',"method"', ',\r"method"');
    push(text, i % 7 === 0 ? '\r\n' : '\n', true);
    if (i % 13 === 0) push(['', '   ', '\r'][i % 3] as string, '\n', false);
  }
  return { bytes: Buffer.from(parts.join('')), expected };
}

/** A store that counts the bytes read from each file, readahead included. */
function counting(inner: FileStore): { store: FileStore; read: Map<string, number> } {
  const read = new Map<string, number>();
  const store: FileStore = {
    location: inner.location,
    stage: (content, max) => inner.stage(content, max),
    stat: (id) => inner.stat(id),
    list: () => inner.list(),
    delete: (id) => inner.delete(id),
    open: async (id, fromByte) => {
      const bytes = await inner.open(id, fromByte);
      if (bytes === undefined) return undefined;
      const counted = async function* () {
        for await (const part of bytes as AsyncIterable<Buffer>) {
          read.set(id, (read.get(id) ?? 0) + part.length);
          yield part;
        }
      };
      return Readable.from(counted(), { objectMode: false, highWaterMark: 1 });
    },
  };
  return { store, read };
}

async function validated(): Promise<{ files: FileStore; read: Map<string, number>; input: ReturnType<typeof bigInput> }> {
  const dir = await mkdtemp(join(tmpdir(), 'llmgw-line-index-'));
  dirs.push(dir);
  const inner = await DirectoryFileStore.open(dir);
  const input = bigInput();
  await putFile(inner, Readable.from([input.bytes]), { id: INPUT, createdAt: 1, filename: 'in.jsonl', purpose: 'batch', owner: null }, 1e9);
  await grantBatch(inner, { batchId: BATCH, inputFileId: INPUT });
  const { store, read } = counting(inner);
  const result = await validateFiles(store, { batchId: BATCH, inputFileId: INPUT, endpoint: '/v1/embeddings', owner: null }, noBeat);
  expect(result).toEqual({ ok: true, total: REQUESTS });
  read.clear();
  return { files: store, read, input };
}

async function collect(lines: AsyncIterable<SplitLine>): Promise<SplitLine[]> {
  const out: SplitLine[] = [];
  for await (const l of lines) out.push(l);
  return out;
}

const CHUNK = { index: 80, start: 40_000, end: 40_500 };
const chunkInput = { batchId: BATCH, inputFileId: INPUT, endpoint: '/v1/embeddings' as const, chunk: CHUNK };

describe("a batch's line index", () => {
  it('lets a chunk deep in a large input read about its own bytes, with the lines a full read gives', async () => {
    const { files, read, input } = await validated();
    const total = input.bytes.length;
    const want = input.expected.slice(CHUNK.start, CHUNK.end);

    const mark = await findLineMark(files, BATCH, CHUNK.start);
    expect(mark).toEqual({ request: 39_936, line: input.expected[39_936]!.line, byte: input.expected[39_936]!.byte });
    const fromMark = await collect(readRequestLines(files, INPUT, CHUNK.start, CHUNK.end, mark));
    const requests = await readChunkRequests(files, chunkInput);
    // Each starts at the mark (at most 255 requests before the chunk): some 140 KB of lines, and one read-ahead.
    const chunkBytes = want.at(-1)!.byte - want[0]!.byte;
    expect(read.get(INPUT)).toBeLessThan(2 * (chunkBytes + 256 * 300) + 2 * 65_536);
    expect(read.get(INPUT)).toBeLessThan(total / 10);
    // The index is read a record at a time: a read-ahead's worth at most, whatever its size.
    expect(read.get(indexFileId(BATCH))).toBeLessThanOrEqual(4 * 65_536);

    read.clear();
    const full = await collect(readRequestLines(files, INPUT, CHUNK.start, CHUNK.end));
    expect(read.get(INPUT)).toBeGreaterThan(want[0]!.byte);
    expect(fromMark).toEqual(want);
    expect(full).toEqual(want);
    expect(requests.map((r) => [r.line, r.customId])).toEqual(want.map((l, i) => [l.line, `req-${CHUNK.start + i}`]));
    // The lines that carry CRLF, a lone \r and multi-byte characters came through whole.
    expect(requests.find((r) => r.customId === 'req-40004')?.body.input).toBe(`q40004 ${'é日本🙂'.repeat(4)} ${'x'.repeat(40004 % 90)}`);
    expect(fromMark.some((l) => l.text.includes('\r'))).toBe(true);
  }, 60_000);

  it('gives every chunk of the batch the same lines as a full read', async () => {
    const { files, input } = await validated();
    for (const chunk of planChunks(REQUESTS, 3_000)) {
      const requests = await readChunkRequests(files, { ...chunkInput, chunk });
      expect(requests.map((r) => r.line)).toEqual(input.expected.slice(chunk.start, chunk.end).map((l) => l.line));
    }
  }, 60_000);

  it('reads from the start for a batch that has no index (validated by an older worker)', async () => {
    const { files, read, input } = await validated();
    expect(await files.delete(indexFileId(BATCH))).toBe(true);
    expect(await findLineMark(files, BATCH, CHUNK.start)).toBeUndefined();
    const requests = await readChunkRequests(files, chunkInput);
    expect(requests.map((r) => r.line)).toEqual(input.expected.slice(CHUNK.start, CHUNK.end).map((l) => l.line));
    expect(read.get(INPUT)).toBeGreaterThan(input.expected[CHUNK.start]!.byte);
  }, 60_000);

  it('is the batch’s hidden scratch, written the same again by a retried validation and removed by finalizing', async () => {
    const { files } = await validated();
    const first = await files.stat(indexFileId(BATCH));
    expect(first?.owner).toBe(chunkOwner(BATCH));
    const again = await validateFiles(files, { batchId: BATCH, inputFileId: INPUT, endpoint: '/v1/embeddings', owner: null }, noBeat);
    expect(again).toEqual({ ok: true, total: REQUESTS });
    expect((await files.stat(indexFileId(BATCH)))?.bytes).toBe(first?.bytes);
    expect(first?.bytes).toBe(51 * (1 + Math.ceil(REQUESTS / INDEX_EVERY)));
    await finalizeFiles(files, { batchId: BATCH, owner: null, chunks: [], started: 0 }, noBeat);
    expect(await files.stat(indexFileId(BATCH))).toBeUndefined();
  }, 60_000);
});

describe('splitting lines with their offsets', () => {
  it('gives the same lines under every cut of the bytes, multi-byte characters and CRLF included', async () => {
    const text = Buffer.from('{"a":"é"}\r\n\n  \r\n{"b":"日本🙂"}\r{"c":1}\n{"d":2}');
    const whole = await collect(splitLines([text]));
    expect(whole).toEqual([
      { text: '{"a":"é"}', line: 1, byte: 0 },
      { text: '', line: 2, byte: 12 },
      { text: '  ', line: 3, byte: 13 },
      { text: '{"b":"日本🙂"}\r{"c":1}', line: 4, byte: 17 },
      { text: '{"d":2}', line: 5, byte: 44 },
    ]);
    for (let cut = 1; cut < text.length; cut++)
      expect(await collect(splitLines([text.subarray(0, cut), text.subarray(cut)]))).toEqual(whole);
    expect(
      await collect(
        splitLines(
          (function* () {
            for (const b of text) yield Buffer.from([b]);
          })(),
        ),
      ),
    ).toEqual(whole);
    // Started at a line's offset, it numbers on from there.
    expect(await collect(splitLines([text.subarray(17)], { linesBefore: 3, byte: 17 }))).toEqual(whole.slice(3));
  });
});
