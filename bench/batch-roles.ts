// The processes of `npm run bench:batch` (bench/batch.ts), each its own process so that on a
// small machine they compete for cores as a deployment's would: the fake engine and the load
// generator of bench:fairness (bench/fairness-roles.ts), a router with a file store, API keys and
// /v1/batches on a Temporal dev server, a control worker running only the batch workflow and its
// real activities (which send each line back through the router, sheddable), and a direct client
// that sends the same lines at once over many connections.
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { Pool } from 'undici';
import { createBatchChunkActivities } from '../activities/batch-chunk.js';
import { createBatchFileActivities } from '../activities/batch-files.js';
import { createCarriedStateActivities } from '../activities/carried-state.js';
import { DirectoryFileStore } from '../batches/file-store.js';
import { loadApiKeys } from '../router/http/auth.js';
import { startRouter } from '../router/http/server.js';
import type { QueueSettings } from '../router/flow/waiting-room.js';
import { StaticRouteSource } from '../router/routes/table.js';
import { llmgwDataConverter } from '../temporal/connection.js';
import { forkRole, readyOf, stopChild } from './cli.js';
import { fairnessRole, MODEL, type EngineShape } from './fairness-roles.js';

export const TASK_QUEUE = 'bench-batches';

type Ready = { port: number; adminPort?: number };
type FromChild = { ready: Ready } | { direct: DirectResult };

export interface DirectResult {
  ok: number;
  failed: number;
  seconds: number;
}

/** In a child: plays `name` with `args` (engine and load as bench:fairness's). */
export function batchRole(name: string, args: string[]): void {
  const say = (m: FromChild) => process.send?.(m);
  if (name === 'router') {
    const [engineUrl = '', keysFile = '', filesDir = '', temporal = '', queueJson = '{}'] = args;
    void (async () => {
      const client = new Client({ connection: await Connection.connect({ address: temporal }), dataConverter: llmgwDataConverter() });
      const store = await DirectoryFileStore.open(filesDir);
      const r = await startRouter({
        source: new StaticRouteSource([{ servedName: MODEL, endpoint: engineUrl }]),
        port: 0,
        host: '127.0.0.1',
        admin: { host: '127.0.0.1', port: 0 },
        apiKeys: loadApiKeys({ file: keysFile, env: {} }),
        scrapeIntervalMs: 200,
        queue: JSON.parse(queueJson) as Partial<QueueSettings>,
        files: { store },
        batches: { client: async () => client, taskQueue: TASK_QUEUE },
        log: () => undefined,
      });
      say({ ready: { port: r.port, adminPort: r.adminPort } });
    })();
  } else if (name === 'worker') {
    const [routerUrl = '', keyFile = '', filesDir = '', temporal = ''] = args;
    // The SDK's own INFO lines (the bundle, the worker's state) would break up the report.
    Runtime.install({ logger: new DefaultLogger('WARN') });
    void (async () => {
      const client = new Client({ connection: await Connection.connect({ address: temporal }), dataConverter: llmgwDataConverter() });
      const files = (() => {
        const store = DirectoryFileStore.open(filesDir);
        return () => store;
      })();
      const worker = await Worker.create({
        connection: await NativeConnection.connect({ address: temporal }),
        taskQueue: TASK_QUEUE,
        workflowsPath: join(__dirname, 'batch-workflows.js'),
        dataConverter: llmgwDataConverter(),
        activities: {
          ...createBatchFileActivities(files),
          ...createBatchChunkActivities(files, { routerUrl, keyFile }),
          ...createCarriedStateActivities(client, undefined),
        },
      });
      void worker.run();
      say({ ready: { port: 0 } });
    })();
  } else if (name === 'direct') {
    process.on('message', (job: { base: string; key: string; bodies: string[]; connections: number }) => {
      void direct(job).then((r) => say({ direct: r }));
    });
    say({ ready: { port: 0 } });
  } else fairnessRole(name, args);
}

/** Sends every body to /v1/chat/completions over `connections` connections, each taking the next body when its last is answered. */
async function direct(job: { base: string; key: string; bodies: string[]; connections: number }): Promise<DirectResult> {
  const pool = new Pool(job.base, { connections: job.connections, pipelining: 1 });
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${job.key}` };
  let next = 0;
  const out = { ok: 0, failed: 0, seconds: 0 };
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: job.connections }, async () => {
      while (next < job.bodies.length) {
        const body = job.bodies[next++] as string;
        try {
          const res = await pool.request({ path: '/v1/chat/completions', method: 'POST', headers, body });
          await res.body.text();
          if (res.statusCode === 200) out.ok++;
          else out.failed++;
        } catch {
          out.failed++;
        }
      }
    }),
  );
  out.seconds = (performance.now() - t0) / 1000;
  await pool.close();
  return out;
}

export interface BatchPaths {
  keysFile: string;
  batchKeyFile: string;
  filesDir: string;
  temporal: string;
}

/** One engine, a router with /v1/batches, a control worker with the batch activities. */
export class BatchDeployment {
  private constructor(
    private readonly children: ChildProcess[],
    readonly base: string,
    readonly admin: string,
  ) {}

  static async start(file: string, shape: EngineShape, paths: BatchPaths, queue: Partial<QueueSettings> = {}): Promise<BatchDeployment> {
    const engine = forkRole<FromChild>(file, ['engine', JSON.stringify(shape)]);
    const e = readyOf(await engine.ready);
    const router = forkRole<FromChild>(file, [
      'router',
      `http://127.0.0.1:${e.port}`,
      paths.keysFile,
      paths.filesDir,
      paths.temporal,
      JSON.stringify(queue),
    ]);
    const r = readyOf(await router.ready);
    const base = `http://127.0.0.1:${r.port}`;
    const worker = forkRole<FromChild>(file, ['worker', base, paths.batchKeyFile, paths.filesDir, paths.temporal]);
    readyOf(await worker.ready);
    return new BatchDeployment([engine.child, router.child, worker.child], base, `http://127.0.0.1:${r.adminPort ?? 0}`);
  }

  stop(): Promise<void> {
    return Promise.all(this.children.map((c) => stopChild(c, 3000))).then(() => undefined);
  }
}

/** The direct client's process. */
export async function runDirect(
  file: string,
  job: { base: string; key: string; bodies: string[]; connections: number },
): Promise<DirectResult> {
  const { child, ready } = forkRole<FromChild>(file, ['direct']);
  readyOf(await ready);
  try {
    return await new Promise<DirectResult>((resolve) => {
      child.on('message', (m: FromChild) => 'direct' in m && resolve(m.direct));
      child.send(job);
    });
  } finally {
    await stopChild(child, 3000);
  }
}
