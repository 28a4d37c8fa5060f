// finalizeBatch's merge on a real directory store, outside Temporal: a completed batch's output
// and error files from its chunk files, and a cancelled or expired one's unrun requests listed in
// its error file from the input file (each custom_id once in output plus errors), the files
// written as OpenAI's `batch_output`, the same files again on a retry.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { DirectoryFileStore, putFile, type FileStore } from '../../batches/file-store.js';
import { chunkFileId, errorLine, outputLine, planChunks, type ResultLine } from '../../batches/batch-lines.js';
import { finalizeFiles, writeChunkFile, type FinalizeInput } from '../../activities/batch-files.js';
import { grantBatch } from '../helpers/batch-grants.js';

const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

const BATCH = `batch_${'cd'.repeat(12)}`;
const INPUT = 'file-input1';
const TOTAL = 25;
const SIZE = 10;
const customId = (i: number) => `req-${i}`;

/** A store holding a 25-request input (with blank lines, as files have) and the chunk files of `done`. */
async function storeWith(done: number[]): Promise<FileStore> {
  const dir = await mkdtemp(join(tmpdir(), 'llmgw-finalize-'));
  dirs.push(dir);
  const store = await DirectoryFileStore.open(dir);
  const lines = Array.from({ length: TOTAL }, (_, i) =>
    JSON.stringify({ custom_id: customId(i), method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: 'x' } }),
  );
  const text = `${lines.slice(0, 5).join('\n')}\n\n${lines.slice(5).join('\n')}\n\n`;
  await putFile(
    store,
    Readable.from([Buffer.from(text)]),
    { id: INPUT, createdAt: 1, filename: 'in.jsonl', purpose: 'batch', owner: 'team-a' },
    1e9,
  );
  await grantBatch(store, { batchId: BATCH, inputFileId: INPUT, owner: 'team-a' });
  const plan = planChunks(TOTAL, SIZE);
  for (const c of done) {
    const chunk = plan[c]!;
    const results: ResultLine[] = [];
    for (let i = chunk.start; i < chunk.end; i++)
      results.push(
        i % 7 === 0
          ? errorLine(`batch_req_${i}`, customId(i), { code: 'model_not_found', message: 'no' })
          : outputLine(`batch_req_${i}`, customId(i), 200, `r${i}`, {}),
      );
    await writeChunkFile(store, BATCH, chunk, results);
  }
  return store;
}

async function linesOf(store: FileStore, id: string | null): Promise<ResultLine[]> {
  if (id === null) return [];
  let text = '';
  for await (const part of (await store.open(id))!) text += (part as Buffer).toString();
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as ResultLine);
}

const base: FinalizeInput = { batchId: BATCH, owner: 'team-a', chunks: [], started: 0 };
const noBeat = () => undefined;

describe('finalizing a batch', () => {
  for (const why of ['expired', 'cancelled'] as const) {
    it(`lists every request a ${why} batch never counted in its error file, each custom_id once in output plus errors`, async () => {
      // Chunks 0 and 2 done (in that order of finishing), chunk 1 started and dropped.
      const store = await storeWith([2, 0]);
      const input: FinalizeInput = {
        ...base,
        chunks: [2, 0],
        started: 3,
        stopped: { why, inputFileId: INPUT, total: TOTAL, chunkSize: SIZE },
      };
      const files = await finalizeFiles(store, input, noBeat);
      const output = await linesOf(store, files.outputFileId);
      const errors = await linesOf(store, files.errorFileId);
      const ids = [...output, ...errors].map((l) => l.custom_id).sort();
      expect(ids).toEqual(Array.from({ length: TOTAL }, (_, i) => customId(i)).sort());
      const unrun = errors.filter((l) => l.error?.code === `batch_${why}`);
      expect(unrun.map((l) => l.custom_id)).toEqual(Array.from({ length: 10 }, (_, i) => customId(10 + i)));
      expect(unrun[0]).toMatchObject({ id: expect.stringMatching(/^batch_req_[0-9a-f]{24}$/), response: null });
      expect(unrun[0]!.error!.message).toMatch(why === 'expired' ? /completion window expired/ : /batch was cancelled/);
      // The counted error lines are there too, in input order: requests 0, 7, 21 (chunk 1's 14 was never counted).
      expect(errors.filter((l) => l.error?.code === 'model_not_found').map((l) => l.custom_id)).toEqual(['req-0', 'req-7', 'req-21']);
      for (const id of [files.outputFileId!, files.errorFileId!])
        expect(await store.stat(id)).toMatchObject({ purpose: 'batch_output', owner: 'team-a' });
      for (let c = 0; c < 3; c++) expect(await store.stat(chunkFileId(BATCH, c))).toBeUndefined();
      // A retry whose first try's answer was lost: the same two files.
      expect(await finalizeFiles(store, input, noBeat)).toEqual(files);
      expect((await linesOf(store, files.errorFileId)).length).toBe(errors.length);
    });
  }

  it('lists all of a batch cancelled before any chunk was done, and nothing unrun for a completed one', async () => {
    const none = await storeWith([]);
    const cancelled = await finalizeFiles(
      none,
      { ...base, stopped: { why: 'cancelled', inputFileId: INPUT, total: TOTAL, chunkSize: SIZE } },
      noBeat,
    );
    expect(cancelled.outputFileId).toBeNull();
    expect((await linesOf(none, cancelled.errorFileId)).map((l) => l.error?.code)).toEqual(Array(TOTAL).fill('batch_cancelled'));

    const all = await storeWith([0, 1, 2]);
    const completed = await finalizeFiles(all, { ...base, chunks: [0, 1, 2], started: 3 }, noBeat);
    expect((await linesOf(all, completed.errorFileId)).map((l) => l.error?.code)).toEqual(Array(4).fill('model_not_found'));
    expect(await linesOf(all, completed.outputFileId)).toHaveLength(TOTAL - 4);
  });

  it('answers a retry after a crash among its deletions with the files the first try wrote', async () => {
    const store = await storeWith([2, 0, 1]);
    const input: FinalizeInput = { ...base, chunks: [2, 0, 1], started: 3 };
    // The first try dies at its second chunk file's removal.
    const deleteFile = store.delete.bind(store);
    let chunkDeletes = 0;
    const crashing: FileStore = Object.assign(Object.create(store) as FileStore, {
      delete: async (id: string) => {
        if (id.includes('chunk') && ++chunkDeletes === 2) throw new Error('the worker died');
        return deleteFile(id);
      },
    });
    await expect(finalizeFiles(crashing, input, noBeat)).rejects.toThrow('the worker died');
    const files = await finalizeFiles(store, input, noBeat);
    expect(files.outputFileId).not.toBeNull();
    expect([...(await linesOf(store, files.outputFileId)), ...(await linesOf(store, files.errorFileId))]).toHaveLength(TOTAL);
  });

  it('leaves the unrun lines out, and still writes what ran, when the input file was deleted', async () => {
    const store = await storeWith([0]);
    await store.delete(INPUT);
    const files = await finalizeFiles(
      store,
      { ...base, chunks: [0], started: 1, stopped: { why: 'expired', inputFileId: INPUT, total: TOTAL, chunkSize: SIZE } },
      noBeat,
    );
    expect([...(await linesOf(store, files.outputFileId)), ...(await linesOf(store, files.errorFileId))]).toHaveLength(SIZE);
  });
});
