// `npm run bench:router` (node dist/bench/router.js [--seconds S] [--router-workers N]): the fake
// engine direct against the same engine through the router, in one run, alternating, with the
// same undici load generator. Engines, router and load generator are separate processes (this
// file forks itself in each role), so the router's cost is not hidden by a shared event loop.
// Prints throughput, added p50/p99 latency, added time to first token, whether inter-chunk gaps
// survive, and CPU per request, next to the targets. Nothing asserts on time: the figures
// depend on the machine, and mean little on one with fewer cores than processes.
import { fork, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { Pool } from 'undici';
import { fakeEngineOptions } from '../fake-engine/options.js';
import { startFakeEngine } from '../fake-engine/server.js';
import { clusterMetricsSource, isRouterWorker, startRouterCluster } from '../router/cluster.js';
import { StaticRouteSource } from '../router/routes.js';
import { startRouter } from '../router/server.js';

type Role = 'engine' | 'router' | 'load';

interface LoadJob {
  base: string;
  concurrency: number;
  durationMs: number;
  stream: boolean;
  body: string;
}

interface LoadResult {
  requests: number;
  errors: number;
  seconds: number;
  latencies: number[];
  ttfts: number[];
  gaps: number[];
  chunksPerStream: number;
}

interface Measured extends LoadResult {
  /** CPU seconds the router's processes and the engine used during the run; NaN off Linux. */
  routerCpu: number;
  engineCpu: number;
}

/** From a child: it is ready (with the processes doing its work), or a load run's result. */
type ChildMessage = { ready: { port: number; pids: number[] } } | { result: LoadResult };

const STREAM_TOKENS_PER_SECOND = 100;
const STREAM_TOKENS = 20;
const NON_STREAM_BODY = JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'How fast is the router?' }], max_tokens: 16 });
const STREAM_BODY = JSON.stringify({
  model: 'demo-stream',
  messages: [{ role: 'user', content: 'Stream me some tokens.' }],
  max_tokens: STREAM_TOKENS,
  stream: true,
});
const TARGETS = { addedP50Ms: 0.5, addedP99Ms: 2, throughputRatio: 0.85, addedTtftMs: 1 };

// ---------------------------------------------------------------------------------------------
// Child roles.

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
  if (worker) clusterMetrics = clusterMetricsSource(router.registry);
  else process.send?.({ ready: { port: router.port, pids: [process.pid] } } satisfies ChildMessage);
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

// ---------------------------------------------------------------------------------------------
// The orchestrator.

interface Spawned {
  child: ChildProcess;
  ready: Promise<{ port: number; pids: number[] }>;
}

function spawn(role: Role, args: string[]): Spawned {
  // LLMGW_BENCH_CPU_PROF=DIR writes a V8 CPU profile of the router process there.
  const profDir = process.env.LLMGW_BENCH_CPU_PROF;
  const execArgv = role === 'router' && profDir ? ['--cpu-prof', '--cpu-prof-dir', profDir] : [];
  const child = fork(__filename, ['--role', role, ...args], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv });
  const ready = new Promise<{ port: number; pids: number[] }>((resolve, reject) => {
    child.once('message', (m: ChildMessage) => ('ready' in m ? resolve(m.ready) : reject(new Error(`unexpected message from ${role}`))));
    child.once('exit', (code) => reject(new Error(`${role} exited with ${code}`)));
  });
  return { child, ready };
}

function load(child: ChildProcess, job: LoadJob): Promise<LoadResult> {
  return new Promise((resolve) => {
    const onMessage = (m: ChildMessage) => {
      if (!('result' in m)) return;
      child.off('message', onMessage);
      resolve(m.result);
    };
    child.on('message', onMessage);
    child.send(job);
  });
}

const CLOCK_TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) the processes have used so far, from /proc; NaN where there is none. */
function cpuSeconds(pids: number[]): number {
  let total = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // Fields after the command name (which may hold spaces) start at state: utime and stime are 12th and 13th.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      total += (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
    } catch {
      return NaN;
    }
  }
  return total;
}

async function measured(loader: ChildProcess, job: LoadJob, routerPids: number[], enginePids: number[]): Promise<Measured> {
  const [r0, e0] = [cpuSeconds(routerPids), cpuSeconds(enginePids)];
  const result = await load(loader, job);
  return { ...result, routerCpu: cpuSeconds(routerPids) - r0, engineCpu: cpuSeconds(enginePids) - e0 };
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

function merge(results: Measured[]): Measured {
  const sum = (f: (r: Measured) => number) => results.reduce((s, r) => s + f(r), 0);
  return {
    requests: sum((r) => r.requests),
    errors: sum((r) => r.errors),
    seconds: sum((r) => r.seconds),
    latencies: results.flatMap((r) => r.latencies),
    ttfts: results.flatMap((r) => r.ttfts),
    gaps: results.flatMap((r) => r.gaps),
    chunksPerStream: sum((r) => r.chunksPerStream) / results.length,
    routerCpu: sum((r) => r.routerCpu),
    engineCpu: sum((r) => r.engineCpu),
  };
}

const ms = (v: number) => `${v.toFixed(3)} ms`;
const us = (seconds: number, requests: number) =>
  Number.isFinite(seconds) && requests > 0 ? `${((seconds / requests) * 1e6).toFixed(0)} µs` : 'n/a';
const mark = (ok: boolean) => (ok ? 'ok  ' : 'MISS');

function flag(name: string, fallback: number): number {
  const at = process.argv.indexOf(name);
  const value = at > 0 ? Number(process.argv[at + 1]) : fallback;
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} takes a positive number`);
  return value;
}

async function main(): Promise<void> {
  const windowMs = flag('--seconds', 2.5) * 1000;
  const routerWorkers = Math.floor(flag('--router-workers', 1));
  const children: ChildProcess[] = [];
  // Disconnecting lets each child exit on its own (and write a profile); the kill is for one that hangs.
  const stopAll = () => {
    for (const c of children) {
      if (c.connected) c.disconnect();
      setTimeout(() => c.exitCode === null && c.kill('SIGKILL'), 2000).unref();
    }
  };
  process.once('exit', stopAll);
  try {
    const plain = spawn('engine', ['demo', '0']);
    const streaming = spawn('engine', ['demo-stream', String(STREAM_TOKENS_PER_SECOND)]);
    children.push(plain.child, streaming.child);
    const [plainReady, streamReady] = await Promise.all([plain.ready, streaming.ready]);
    const plainUrl = `http://127.0.0.1:${plainReady.port}`;
    const streamUrl = `http://127.0.0.1:${streamReady.port}`;
    const router = spawn('router', [plainUrl, streamUrl, String(routerWorkers)]);
    const loader = spawn('load', []);
    children.push(router.child, loader.child);
    const routerReady = await router.ready;
    const routerUrl = `http://127.0.0.1:${routerReady.port}`;
    await loader.ready;

    const cpus = os.cpus();
    console.log(
      `router benchmark: ${cpus.length} CPUs (${cpus[0]?.model ?? 'unknown'}), node ${process.version}, router processes: ${routerWorkers}`,
    );
    console.log(
      `engines, router and load generator in separate processes; each figure: ${(2 * windowMs) / 1000} s direct and ${(2 * windowMs) / 1000} s through the router, alternating\n`,
    );

    const scenarios = [
      { name: 'non-streaming, concurrency 1', concurrency: 1, stream: false },
      { name: 'non-streaming, concurrency 16', concurrency: 16, stream: false },
      { name: 'non-streaming, concurrency 64', concurrency: 64, stream: false },
      { name: `streaming ${STREAM_TOKENS} tokens at ${STREAM_TOKENS_PER_SECOND}/s, conc. 16`, concurrency: 16, stream: true },
    ];
    const rows: Array<{ name: string; direct: Measured; routed: Measured }> = [];
    for (const s of scenarios) {
      const directBase = s.stream ? streamUrl : plainUrl;
      const enginePids = (s.stream ? streamReady : plainReady).pids;
      const job = (base: string, durationMs: number): LoadJob => ({
        base,
        concurrency: s.concurrency,
        durationMs,
        stream: s.stream,
        body: s.stream ? STREAM_BODY : NON_STREAM_BODY,
      });
      // Warm both paths (connections, JIT) before measuring.
      await load(loader.child, job(directBase, 500));
      await load(loader.child, job(routerUrl, 500));
      const direct: Measured[] = [];
      const routed: Measured[] = [];
      for (let round = 0; round < 2; round++) {
        direct.push(await measured(loader.child, job(directBase, windowMs), routerReady.pids, enginePids));
        routed.push(await measured(loader.child, job(routerUrl, windowMs), routerReady.pids, enginePids));
      }
      rows.push({ name: s.name, direct: merge(direct), routed: merge(routed) });
      process.stderr.write(`  measured: ${s.name}\n`);
    }

    console.log(
      'scenario                                   direct req/s  router req/s  ratio  added p50     added p99     errors  CPU/request: engine  router',
    );
    for (const r of rows) {
      const rpsD = r.direct.requests / r.direct.seconds;
      const rpsR = r.routed.requests / r.routed.seconds;
      const p50 = percentile(r.routed.latencies, 50) - percentile(r.direct.latencies, 50);
      const p99 = percentile(r.routed.latencies, 99) - percentile(r.direct.latencies, 99);
      console.log(
        `${r.name.padEnd(42)} ${rpsD.toFixed(0).padStart(12)}  ${rpsR.toFixed(0).padStart(12)}  ${(rpsR / rpsD).toFixed(3)}  ${ms(p50).padStart(12)}  ${ms(p99).padStart(12)}  ` +
          `${`${r.direct.errors}/${r.routed.errors}`.padEnd(6)}  ${us(r.direct.engineCpu, r.direct.requests).padStart(19)}  ${us(r.routed.routerCpu, r.routed.requests).padStart(6)}`,
      );
    }

    const [, c16, c64, st] = rows as [unknown, (typeof rows)[number], (typeof rows)[number], (typeof rows)[number]];
    const added50 = percentile(c16.routed.latencies, 50) - percentile(c16.direct.latencies, 50);
    const added99 = percentile(c16.routed.latencies, 99) - percentile(c16.direct.latencies, 99);
    const ratio = c64.routed.requests / c64.routed.seconds / (c64.direct.requests / c64.direct.seconds);
    const ttftD = percentile(st.direct.ttfts, 50);
    const ttftR = percentile(st.routed.ttfts, 50);
    const [gapD50, gapR50] = [percentile(st.direct.gaps, 50), percentile(st.routed.gaps, 50)];
    const [gapD99, gapR99] = [percentile(st.direct.gaps, 99), percentile(st.routed.gaps, 99)];
    // Preserved: the same cadence, and no chunks merged on the way (as many per stream).
    const gapsKept = Math.abs(gapR50 - gapD50) <= 1 && st.routed.chunksPerStream >= 0.95 * st.direct.chunksPerStream;
    console.log('\ntargets');
    console.log(
      `  ${mark(added50 <= TARGETS.addedP50Ms)} added p50 at concurrency 16: ${ms(added50)} (target <= ${TARGETS.addedP50Ms} ms)`,
    );
    console.log(
      `  ${mark(added99 <= TARGETS.addedP99Ms)} added p99 at concurrency 16: ${ms(added99)} (target <= ${TARGETS.addedP99Ms} ms)`,
    );
    console.log(
      `  ${mark(ratio >= TARGETS.throughputRatio)} throughput at concurrency 64: ${(ratio * 100).toFixed(1)} % of direct (target >= ${TARGETS.throughputRatio * 100} %)`,
    );
    console.log(
      `  ${mark(ttftR - ttftD <= TARGETS.addedTtftMs)} added time to first token (p50): ${ms(ttftR - ttftD)} (direct ${ms(ttftD)}, router ${ms(ttftR)}; target <= ${TARGETS.addedTtftMs} ms)`,
    );
    console.log(
      `  ${mark(gapsKept)} inter-chunk gaps preserved: p50 ${ms(gapD50)} direct vs ${ms(gapR50)} router, p99 ${ms(gapD99)} vs ${ms(gapR99)}, ` +
        `token chunks per stream ${st.direct.chunksPerStream.toFixed(1)} vs ${st.routed.chunksPerStream.toFixed(1)}`,
    );
    if (cpus.length < 4 + routerWorkers) {
      console.log(
        `\nnote: ${cpus.length} CPUs for ${4 + routerWorkers} busy processes: the processes compete for cores, so these figures understate the router.`,
      );
    }
  } finally {
    stopAll();
  }
}

// ---------------------------------------------------------------------------------------------

const roleAt = process.argv.indexOf('--role');
if (roleAt < 0) {
  main().then(
    () => setTimeout(() => process.exit(0), 300),
    (err: unknown) => {
      console.error(`bench:router failed: ${(err as Error).stack ?? String(err)}`);
      process.exit(1);
    },
  );
} else {
  const role = process.argv[roleAt + 1] as Role;
  const [a = '', b = '', c = '1'] = process.argv.slice(roleAt + 2);
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
