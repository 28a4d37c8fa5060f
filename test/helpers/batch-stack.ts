// The batch tests' stack: a dev server worker running the real batch workflow and activities
// on a queue of its own, a directory file store, fake engines (`demo` quick, `slow` a quarter
// second a line) and a router with three API keys and /v1/batches on. The worker and the router
// can be restarted mid-batch (test/e2e/batch-restarts.test.ts).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import type { Batch } from 'openai/resources/batches';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Client } from '@temporalio/client';
import { afterAll, beforeAll } from 'vitest';
import { createBatchChunkActivities, type BatchLineOutcome } from '../../activities/batch-chunk.js';
import { createBatchFileActivities } from '../../activities/batch-files.js';
import { createCarriedStateActivities } from '../../activities/carried-state.js';
import { DirectoryFileStore } from '../../batches/file-store.js';
import { ApiKeys } from '../../router/http/auth.js';
import { scopeOf } from '../../router/http/key-scope.js';
import type { RouterOptions } from '../../router/http/server.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { engine, router, routerMetric, routers, url, useRouterHarness } from './router-harness.js';
import { temporalAddress, testClient, uniqueId } from './temporal.js';

export const FINAL = ['completed', 'failed', 'expired', 'cancelled'];

/**
 * The first key's id, its batches' owner. Batches are listed from the namespace's visibility by
 * owner, and the test files that use this stack run side by side on one dev server: each file
 * names its keys apart, or one file's batches are listed by the other's key.
 */
export const OWNER_A = uniqueId('team-a');
/** The id of the key scoped to `demo` (a namespace member may hold it, and forge a batch as it). */
export const OWNER_C = uniqueId('team-c');

const KEYS = new ApiKeys([
  { key: 'key-of-team-a', id: OWNER_A },
  { key: 'key-of-team-b', id: uniqueId('team-b') },
  { key: 'key-of-the-batcher', id: uniqueId('batcher') },
  // Scoped to `demo`: its batches may not ask for `slow`.
  { key: 'key-of-team-c', id: OWNER_C, scope: scopeOf(['demo'], undefined) },
]);

export interface BatchStack {
  client(): Client;
  /** The queue the stack's control worker polls (a hand-started batch workflow goes there). */
  taskQueue: string;
  /** Engines and a router; `a` and `b` are two keys' clients. */
  start(): Promise<{ a: OpenAI; b: OpenAI; c: OpenAI; restartRouter(): Promise<void> }>;
  /** Stops the worker (its running chunks are cancelled, as a worker killed mid-chunk) and starts another. */
  restartWorker(): Promise<void>;
  /** Sends batch lines to `url` instead of the router (undefined: the router again). */
  sendLinesTo(url: string | undefined): void;
  /** The lines the workers counted by outcome, as llmgw_batch_lines does. */
  lines: Record<BatchLineOutcome, number>;
}

export function useBatchStack(): BatchStack {
  useRouterHarness();
  let client: Client;
  let closeClient: () => Promise<void>;
  let dir: string;
  let worker: Worker | undefined;
  let running: Promise<void> | undefined;
  let connection: NativeConnection;
  const taskQueue = uniqueId('batches');
  const routerUrl: { base?: string; override?: string } = {};
  const lines: Record<BatchLineOutcome, number> = { completed: 0, failed: 0, retried: 0 };

  const startWorker = async (): Promise<void> => {
    const store = await DirectoryFileStore.open(join(dir, 'files'));
    const files = () => Promise.resolve(store);
    worker = await Worker.create({
      connection,
      taskQueue,
      workflowsPath: join(__dirname, '../workflows/batch.ts'),
      dataConverter: llmgwDataConverter(),
      activities: {
        ...createBatchFileActivities(files),
        // The router starts after the worker: its URL is read when a chunk runs.
        ...createBatchChunkActivities(
          files,
          {
            get routerUrl() {
              return routerUrl.override ?? routerUrl.base;
            },
            keyFile: join(dir, 'batch.key'),
          },
          (outcome, n) => (lines[outcome] += n),
        ),
        ...createCarriedStateActivities(client, undefined),
      },
    });
    running = worker.run();
  };
  const stopWorker = async (): Promise<void> => {
    worker?.shutdown();
    await running?.catch(() => undefined);
    worker = undefined;
  };

  beforeAll(async () => {
    ({ client, close: closeClient } = await testClient());
    dir = await mkdtemp(join(tmpdir(), 'llmgw-batch-'));
    await writeFile(join(dir, 'batch.key'), 'key-of-the-batcher\n', { mode: 0o600 });
    connection = await NativeConnection.connect({ address: temporalAddress() });
    await startWorker();
  }, 60_000);

  afterAll(async () => {
    await stopWorker();
    await connection?.close();
    await closeClient?.();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  return {
    lines,
    sendLinesTo: (url) => void (routerUrl.override = url),
    client: () => client,
    taskQueue,
    async start() {
      const quick = await engine({ model: 'demo' });
      const slow = await engine({ model: 'slow', tokensPerSecond: 20 });
      const routes = [
        { servedName: 'demo', endpoint: url(quick) },
        { servedName: 'slow', endpoint: url(slow) },
      ];
      const options: Partial<RouterOptions> = {
        apiKeys: KEYS,
        files: { store: await DirectoryFileStore.open(join(dir, 'files')) },
        // Chunks of 100, at most 4 a run: a 1,000-line batch continues as new twice.
        batches: { client: async () => client, taskQueue, tuning: { chunkSize: 100, parallelChunks: 3, chunksPerRun: 4 } },
      };
      let r = await router(routes, options);
      routerUrl.base = r.base;
      const as = (key: string) => new OpenAI({ baseURL: `${r.base}/v1`, apiKey: key, maxRetries: 2 });
      return {
        a: as('key-of-team-a'),
        b: as('key-of-team-b'),
        c: as('key-of-team-c'),
        // On the same port: lines in flight find it again when it is back.
        async restartRouter() {
          // While lines are in flight, so that the restart cuts some (not in a continue-as-new's
          // pause between runs, when the batch sends nothing): bounded, 100 polls 50 ms apart.
          for (let poll = 0; poll < 100 && (await routerMetric(r.admin, 'llmgw_router_inflight_requests')) === 0; poll++)
            await new Promise((resolve) => setTimeout(resolve, 50));
          const port = r.router.port;
          routers.splice(routers.indexOf(r.router), 1);
          await r.router.close(0);
          r = await router(routes, { ...options, port });
        },
      };
    },
    async restartWorker() {
      await stopWorker();
      await startWorker();
    },
  };
}

export const chatLine = (id: string, model = 'demo', maxTokens = 4) =>
  JSON.stringify({
    custom_id: id,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model, messages: [{ role: 'user', content: id }], max_tokens: maxTokens },
  });
export const embedLine = (id: string) =>
  JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/embeddings', body: { model: 'demo', input: id } });

export async function upload(openai: OpenAI, lines: string[]): Promise<string> {
  return (await openai.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'in.jsonl'), purpose: 'batch' })).id;
}

export async function until(openai: OpenAI, id: string, done: (b: Batch) => boolean, withinMs: number): Promise<Batch> {
  const end = Date.now() + withinMs;
  for (;;) {
    const b = await openai.batches.retrieve(id);
    if (done(b) || Date.now() > end) return b;
    await new Promise((r) => setTimeout(r, 200));
  }
}

export async function linesOf(openai: OpenAI, fileId: string | null | undefined): Promise<Record<string, unknown>[]> {
  if (!fileId) return [];
  const text = await (await openai.files.content(fileId)).text();
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}
