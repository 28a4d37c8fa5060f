// A batch's grant on a real directory store, outside Temporal: the batch activities act only on
// what the router wrote at POST /v1/batches. A `batch` workflow a namespace member starts by hand
// (no grant, another owner, a scope dropped, another file) is refused before a line of its input
// is read, as is a chunk after the grant's window; a genuine batch runs as granted (its scope
// from the grant) and still finalizes after its window, which removes the grant.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { ApplicationFailure } from '@temporalio/common';
import { afterEach, describe, expect, it } from 'vitest';
import { DirectoryFileStore, putFile, type FileStore } from '../../batches/file-store.js';
import { chunkFileId, errorFileId, grantFileId, indexFileId, outputFileId, outputLine, planChunks } from '../../batches/batch-lines.js';
import { readBatchGrant } from '../../batches/batch-grant.js';
import { finalizeFiles, validateFiles, writeChunkFile, type ValidateInput } from '../../activities/batch-files.js';
import { readGrantedChunk } from '../../activities/batch-chunk.js';
import { BATCH_NOT_GRANTED, BATCH_WINDOW_ENDED } from '../../activities/batch-not-configured.js';
import { grantBatch } from '../helpers/batch-grants.js';

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

const BATCH = `batch_${'ab'.repeat(12)}`;
const INPUT = 'file-lowInput';
const noBeat = () => undefined;
const NOT_CREATED =
  /^batch batch_(ab){12} was not created through a router's POST \/v1\/batches \(its grant: .*\), so it runs nothing; create it there$/;
const WINDOW_OVER =
  /completion window ended at .*: none of its lines runs after it; create the batch again through a router's POST \/v1\/batches/;
const now = () => Math.floor(Date.now() / 1000);

/** A store holding `low`'s input (one line for `small`, which its key may use, one for `big`), counting reads per file. */
async function lowStore(): Promise<{ files: FileStore; opened: string[] }> {
  const dir = await mkdtemp(join(tmpdir(), 'llmgw-grant-'));
  dirs.push(dir);
  const inner = await DirectoryFileStore.open(dir);
  const line = (id: string, model: string) =>
    JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/embeddings', body: { model, input: id } });
  await putFile(
    inner,
    Readable.from([Buffer.from(`${line('a', 'small')}\n${line('b', 'big')}\n`)]),
    { id: INPUT, createdAt: 1, filename: 'in.jsonl', purpose: 'batch', owner: 'low' },
    1e6,
  );
  const opened: string[] = [];
  const files: FileStore = Object.assign(Object.create(inner) as FileStore, {
    open: (id: string, from?: number) => {
      opened.push(id);
      return inner.open(id, from);
    },
  });
  return { files, opened };
}

/** What a namespace member sends: their own key's id as owner, no scope, their own file. */
const forged: ValidateInput = { batchId: BATCH, inputFileId: INPUT, endpoint: '/v1/embeddings', owner: 'low' };
const SMALL_ONLY = { models: ['small'], adapters: [] };
const chunk = { batchId: BATCH, inputFileId: INPUT, endpoint: '/v1/embeddings' as const, chunk: { index: 0, start: 0, end: 2 } };

async function expectRefused(call: Promise<unknown>, message: RegExp, type = BATCH_NOT_GRANTED): Promise<void> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApplicationFailure);
  expect(err).toMatchObject({ type, nonRetryable: true });
  expect((err as Error).message).toMatch(message);
}

describe("a batch's grant", () => {
  const cases: [string, (files: FileStore) => Promise<unknown>][] = [
    ['no grant', async () => undefined],
    ['a grant to another owner', (files) => grantBatch(files, { batchId: BATCH, inputFileId: INPUT, owner: 'team-a' })],
    [
      'a grant with a scope the input drops',
      (files) => grantBatch(files, { batchId: BATCH, inputFileId: INPUT, owner: 'low', scope: SMALL_ONLY }),
    ],
    ['a grant for another input file', (files) => grantBatch(files, { batchId: BATCH, inputFileId: 'file-other', owner: 'low' })],
    [
      'a grant for another endpoint',
      (files) => grantBatch(files, { batchId: BATCH, inputFileId: INPUT, owner: 'low', endpoint: '/v1/chat/completions' }),
    ],
  ];
  for (const [what, setUp] of cases) {
    it(`refuses a hand-started batch with ${what}, reading none of its input`, async () => {
      const { files, opened } = await lowStore();
      await setUp(files);
      await expectRefused(validateFiles(files, forged, noBeat), NOT_CREATED);
      // A chunk is told the batch's file and endpoint, not its owner or scope: it runs the granted lines or none.
      if (!/owner|scope/.test(what)) await expectRefused(readGrantedChunk(files, chunk), NOT_CREATED);
      expect(opened.filter((id) => id !== grantFileId(BATCH))).toEqual([]);
      expect(await files.stat(indexFileId(BATCH))).toBeUndefined();
    });
  }

  it("refuses validation and a chunk once the grant's window is over, reading none of the input", async () => {
    const { files, opened } = await lowStore();
    await grantBatch(files, { batchId: BATCH, inputFileId: INPUT, owner: 'low', createdAt: now() - 60, expiresAt: now() - 1 });
    await expectRefused(validateFiles(files, forged, noBeat), WINDOW_OVER, BATCH_WINDOW_ENDED);
    await expectRefused(readGrantedChunk(files, chunk), WINDOW_OVER, BATCH_WINDOW_ENDED);
    expect(opened.filter((id) => id !== grantFileId(BATCH))).toEqual([]);
  });

  it('refuses to finalize a batch no router granted, or for another owner, writing nothing', async () => {
    const { files } = await lowStore();
    await writeChunkFile(files, BATCH, planChunks(2, 2)[0]!, [outputLine('batch_req_1', 'a', 200, 'r1', {})]);
    const input = { batchId: BATCH, owner: 'low', chunks: [0], started: 1 };
    await expectRefused(finalizeFiles(files, input, noBeat), NOT_CREATED);
    await grantBatch(files, { batchId: BATCH, inputFileId: INPUT, owner: 'team-a' });
    await expectRefused(finalizeFiles(files, input, noBeat), NOT_CREATED);
    await expectRefused(finalizeFiles(files, { ...input, chunks: [], started: 0 }, noBeat), NOT_CREATED);
    expect(await files.stat(outputFileId(BATCH))).toBeUndefined();
    expect(await files.stat(errorFileId(BATCH))).toBeUndefined();
    expect(await files.stat(chunkFileId(BATCH, 0))).toBeDefined();
    expect(await readBatchGrant(files, BATCH)).toMatchObject({ owner: 'team-a' });
  });

  it('runs a granted batch under its scope, and finalizes it after its window, removing the grant last', async () => {
    const { files } = await lowStore();
    await grantBatch(files, { batchId: BATCH, inputFileId: INPUT, owner: 'low', scope: SMALL_ONLY });
    const refused = await validateFiles(files, { ...forged, scope: SMALL_ONLY }, noBeat);
    expect(refused).toMatchObject({ ok: false, errors: [{ code: 'model_not_allowed', line: 2 }] });

    const both = { models: ['small', 'big'], adapters: [] };
    await grantBatch(files, { batchId: BATCH, inputFileId: INPUT, owner: 'low', scope: both });
    // The same names in another order are the same scope.
    expect(await validateFiles(files, { ...forged, scope: { models: ['big', 'small'], adapters: [] } }, noBeat)).toEqual({
      ok: true,
      total: 2,
    });
    expect((await readGrantedChunk(files, chunk)).map((r) => r.customId)).toEqual(['a', 'b']);

    // The window ends with the chunk counted: the expired batch's files are still written, as its owner's.
    const expiresAt = now() - 1;
    await grantBatch(files, { batchId: BATCH, inputFileId: INPUT, owner: 'low', scope: both, expiresAt });
    await expectRefused(readGrantedChunk(files, chunk), WINDOW_OVER, BATCH_WINDOW_ENDED);
    await writeChunkFile(files, BATCH, planChunks(2, 1)[0]!, [outputLine('batch_req_1', 'a', 200, 'r1', {})]);
    const stopped = { why: 'expired' as const, inputFileId: INPUT, total: 2, chunkSize: 1 };
    const done = await finalizeFiles(files, { batchId: BATCH, owner: 'low', chunks: [0], started: 2, stopped }, noBeat);
    expect(done.outputFileId).not.toBeNull();
    expect(done.errorFileId).not.toBeNull();
    expect(await files.stat(done.errorFileId!)).toMatchObject({ owner: 'low', purpose: 'batch_output' });
    expect(await readBatchGrant(files, BATCH)).toBeUndefined();
    // A retry whose first try's answer was lost: the same files, without the grant.
    expect(await finalizeFiles(files, { batchId: BATCH, owner: 'low', chunks: [0], started: 2, stopped }, noBeat)).toEqual(done);
  });

  it('finds a finished try of a batch that counted no chunk by its files, the grant gone', async () => {
    const { files } = await lowStore();
    await grantBatch(files, { batchId: BATCH, inputFileId: INPUT, owner: 'low' });
    const input = {
      batchId: BATCH,
      owner: 'low',
      chunks: [],
      started: 0,
      stopped: { why: 'cancelled' as const, inputFileId: INPUT, total: 2, chunkSize: 1 },
    };
    const done = await finalizeFiles(files, input, noBeat);
    expect(done).toEqual({ outputFileId: null, errorFileId: expect.stringMatching(/errors$/) });
    expect(await finalizeFiles(files, input, noBeat)).toEqual(done);
  });
});
