// The router benchmark's child processes: a fake engine, the router (one process or a cluster),
// and an undici load generator for what wrk cannot measure (time to first token and the gaps
// between streamed chunks) or when wrk is not installed. Benchmark side: bench/router.ts forks
// its own file with `--role` and lands here.
import { Pool } from 'undici';
import { fakeEngineOptions } from '../fake-engine/options.js';
import { startFakeEngine } from '../fake-engine/server.js';
import { announceListening, clusterMetricsSource, isRouterWorker, startRouterCluster } from '../router/cluster.js';
import { StaticRouteSource } from '../router/routes/table.js';
import { startRouter } from '../router/http/server.js';

export type Role = 'engine' | 'router' | 'load';

export interface LoadJob {
  base: string;
  concurrency: number;
  durationMs: number;
  stream: boolean;
  body: string;
}

export interface LoadResult {
  requests: number;
  errors: number;
  seconds: number;
  latencies: number[];
  ttfts: number[];
  gaps: number[];
  chunksPerStream: number;
}

/** From a child: it is ready (with the processes doing its work), or a load run's result. */
export type ChildMessage = { ready: { port: number; pids: number[] } } | { result: LoadResult };

async function runEngine(name: string, tokensPerSecond: number): Promise<void> {
  const engine = await startFakeEngine(
    fakeEngineOptions({ port: 0, model: name, servedModelNames: [name], tokensPerSecond, maxConcurrency: 1024 }),
  );
  process.send?.({ ready: { port: engine.port, pids: [process.pid] } } satisfies ChildMessage);
}

async function runRouterRole(plain: string, stream: string, workers: number): Promise<void> {
  const log = (line: string) => process.stderr.write(`${line}\n`);
  if (workers > 1 && !isRouterWorker()) {
    const routers = await startRouterCluster(workers, log);
    process.send?.({ ready: { port: routers.port, pids: [process.pid, ...routers.pids()] } } satisfies ChildMessage);
    return;
  }
  const source = new StaticRouteSource([
    { servedName: 'demo', endpoint: plain },
    { servedName: 'demo-stream', endpoint: stream },
  ]);
  let clusterMetrics: (() => Promise<string>) | undefined;
  const worker = isRouterWorker();
  const router = await startRouter({
    source,
    port: 0,
    host: '127.0.0.1',
    log,
    metricsText: worker ? () => (clusterMetrics as () => Promise<string>)() : undefined,
  });
  if (worker) {
    clusterMetrics = clusterMetricsSource(router.registry);
    announceListening(router.port, router.adminPort);
  } else process.send?.({ ready: { port: router.port, pids: [process.pid] } } satisfies ChildMessage);
}

const CONTENT_MARK = Buffer.from('{"content":');

async function runLoad(job: LoadJob): Promise<LoadResult> {
  const pool = new Pool(job.base, { connections: job.concurrency, pipelining: 1, keepAliveTimeout: 4000 });
  const latencies: number[] = [];
  const ttfts: number[] = [];
  const gaps: number[] = [];
  let chunks = 0;
  let streams = 0;
  let errors = 0;
  const started = performance.now();
  const end = started + job.durationMs;
  const worker = async (): Promise<void> => {
    while (performance.now() < end) {
      const t0 = performance.now();
      try {
        const { statusCode, body } = await pool.request({
          path: '/v1/chat/completions',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: job.body,
        });
        if (job.stream) {
          let last = 0;
          for await (const chunk of body as AsyncIterable<Buffer>) {
            // Only chunks carrying a token count: the role chunk comes with the headers.
            if (chunk.indexOf(CONTENT_MARK) < 0) continue;
            const now = performance.now();
            if (last === 0) ttfts.push(now - t0);
            else gaps.push(now - last);
            last = now;
            chunks++;
          }
          streams++;
        } else {
          await body.arrayBuffer();
        }
        if (statusCode !== 200) errors++;
        else latencies.push(performance.now() - t0);
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: job.concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  await pool.close();
  return { requests: latencies.length, errors, seconds, latencies, ttfts, gaps, chunksPerStream: streams ? chunks / streams : 0 };
}

/** In a forked child: plays `role` with the arguments after it until the orchestrator disconnects. */
export function runRole(role: Role, args: string[]): void {
  const [a = '', b = '', c = '1'] = args;
  // A child whose orchestrator is gone has nothing left to do.
  process.on('disconnect', () => process.exit(0));
  switch (role) {
    case 'engine':
      void runEngine(a, Number(b));
      break;
    case 'router':
      void runRouterRole(a, b, Number(c));
      break;
    case 'load':
      process.on('message', (job: LoadJob) => {
        void runLoad(job).then((result) => process.send?.({ result } satisfies ChildMessage));
      });
      process.send?.({ ready: { port: 0, pids: [process.pid] } } satisfies ChildMessage);
      break;
  }
}
