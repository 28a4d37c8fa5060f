// `npm run bench:router` (node dist/bench/router.js [--seconds S] [--rounds R] [--router-workers N]):
// the fake engine direct, through llmgw's router and (when nginx is on PATH) through nginx as a
// plain keep-alive reverse proxy, in one run, in alternating rounds, with wrk -t1 -c32 as the
// load (the undici generator when wrk is missing). Then streaming, direct against the router:
// time to first token and whether inter-chunk gaps survive. Prints throughput, each proxy's
// share of direct, added p50/p99 and CPU per request for engine and proxy (from /proc). Engines,
// proxies and load generator are separate processes. Nothing asserts on time: the figures depend
// on the machine, and mean little on one with fewer cores than busy processes.
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { findFreePort } from '../common/ports.js';
import { numberFlag } from './cli.js';
import { cpuSeconds, onPath, runWrk, startNginx, writeWrkScript, type Nginx } from './router-peers.js';
import { runRole, type ChildMessage, type LoadJob, type LoadResult, type Role } from './router-roles.js';

const STREAM_TOKENS_PER_SECOND = 100;
const STREAM_TOKENS = 20;
const CONNECTIONS = 32;
const NON_STREAM_BODY = JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'How fast is the router?' }], max_tokens: 16 });
const STREAM_BODY = JSON.stringify({
  model: 'demo-stream',
  messages: [{ role: 'user', content: 'Stream me some tokens.' }],
  max_tokens: STREAM_TOKENS,
  stream: true,
});
/** The issue's goals: router throughput >= 0.8 of nginx's share of direct; added p50 <= 0.3 ms at c32. */
const TARGETS = { shareOfNginx: 0.8, addedP50Ms: 0.3, addedTtftMs: 1 };

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

function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}
const median = (values: readonly number[]) => percentile(values, 50);

/** One window of load against one peer, with the CPU its processes used. */
interface Window {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  requests: number;
  engineCpu: number;
  proxyCpu: number;
}

interface Peer {
  name: string;
  url: string;
  /** The proxy's processes; empty for direct. */
  pids: number[];
  windows: Window[];
}

const fixed = (v: number, digits: number) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');
const us = (cpu: number, requests: number) => (Number.isFinite(cpu) && requests > 0 ? `${((cpu / requests) * 1e6).toFixed(0)} µs` : 'n/a');
const mark = (ok: boolean) => (ok ? 'ok  ' : 'MISS');

async function main(): Promise<void> {
  const seconds = numberFlag('--seconds', 4);
  const rounds = Math.floor(numberFlag('--rounds', 3));
  const routerWorkers = Math.floor(numberFlag('--router-workers', 1));
  const children: ChildProcess[] = [];
  let nginx: Nginx | undefined;
  const scratch = mkdtempSync(join(os.tmpdir(), 'llmgw-bench-router-'));
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

    const wrk = onPath('wrk');
    const nginxBin = onPath('nginx');
    const peers: Peer[] = [
      { name: 'direct', url: plainUrl, pids: [], windows: [] },
      {
        name: `llmgw router${routerWorkers > 1 ? ` (${routerWorkers} workers)` : ''}`,
        url: routerUrl,
        pids: routerReady.pids,
        windows: [],
      },
    ];
    if (nginxBin) {
      nginx = await startNginx(nginxBin, await findFreePort(), plainUrl);
      peers.push({ name: 'nginx (keep-alive proxy)', url: `http://127.0.0.1:${nginx.port}`, pids: [nginx.pid], windows: [] });
    }

    const cpus = os.cpus();
    console.log(
      `router benchmark: ${cpus.length} CPUs (${cpus[0]?.model ?? 'unknown'}), node ${process.version}, load ${os.loadavg()[0]?.toFixed(1)}`,
    );
    console.log(
      `non-streaming chat, ${CONNECTIONS} connections, ${wrk ? 'wrk -t1' : 'undici load generator (wrk not on PATH)'}; ` +
        `${rounds} rounds of ${seconds} s per peer, alternating${nginxBin ? '' : '; nginx not on PATH: no nginx peer'}\n`,
    );

    const script = wrk ? writeWrkScript(scratch, NON_STREAM_BODY) : '';
    const measure = async (peer: Peer, durationS: number): Promise<Window> => {
      const e0 = cpuSeconds(plainReady.pids);
      const p0 = cpuSeconds(peer.pids);
      let w: Omit<Window, 'engineCpu' | 'proxyCpu'>;
      if (wrk) {
        const r = await runWrk(wrk, script, `${peer.url}/v1/chat/completions`, CONNECTIONS, durationS);
        w = { rps: r.requests / r.seconds, p50: r.p50, p99: r.p99, errors: r.errors, requests: r.requests };
      } else {
        const job = { base: peer.url, concurrency: CONNECTIONS, durationMs: durationS * 1000, stream: false, body: NON_STREAM_BODY };
        const r = await load(loader.child, job);
        w = {
          rps: r.requests / r.seconds,
          p50: median(r.latencies),
          p99: percentile(r.latencies, 99),
          errors: r.errors,
          requests: r.requests,
        };
      }
      return { ...w, engineCpu: cpuSeconds(plainReady.pids) - e0, proxyCpu: cpuSeconds(peer.pids) - p0 };
    };
    // Warm every path (connections, JIT) before measuring.
    for (const peer of peers) await measure(peer, 1);
    for (let round = 0; round < rounds; round++) {
      for (const peer of peers) peer.windows.push(await measure(peer, seconds));
      process.stderr.write(
        `  round ${round + 1}/${rounds}: ${peers.map((p) => `${p.name} ${fixed(p.windows[round]?.rps ?? NaN, 0)}/s`).join(', ')}\n`,
      );
    }

    const direct = peers[0] as Peer;
    console.log(
      'peer                          req/s (median)  share of direct  p50 ms   added p50  p99 ms   errors  CPU/request: engine  proxy',
    );
    const shareOf = (peer: Peer) => median(peer.windows.map((w, i) => w.rps / (direct.windows[i] as Window).rps));
    const addedP50 = (peer: Peer) => median(peer.windows.map((w, i) => w.p50 - (direct.windows[i] as Window).p50));
    for (const peer of peers) {
      const sum = (f: (w: Window) => number) => peer.windows.reduce((s, w) => s + f(w), 0);
      const requests = sum((w) => w.requests);
      console.log(
        `${peer.name.padEnd(30)}${fixed(median(peer.windows.map((w) => w.rps)), 0).padStart(14)}  ${fixed(shareOf(peer), 3).padStart(15)}  ` +
          `${fixed(median(peer.windows.map((w) => w.p50)), 3).padStart(6)}  ${(peer === direct ? '' : fixed(addedP50(peer), 3)).padStart(9)}  ` +
          `${fixed(median(peer.windows.map((w) => w.p99)), 3).padStart(6)}  ${String(sum((w) => w.errors)).padStart(6)}  ` +
          `${us(
            sum((w) => w.engineCpu),
            requests,
          ).padStart(19)}  ${
            peer === direct
              ? ''
              : us(
                  sum((w) => w.proxyCpu),
                  requests,
                )
          }`,
      );
      console.log(`  rounds: ${peer.windows.map((w) => `${w.rps.toFixed(0)}/s p50 ${w.p50.toFixed(3)} ms`).join(' | ')}`);
    }

    // Streaming: what wrk cannot see.
    const job = (base: string, durationMs: number): LoadJob => ({ base, concurrency: 16, durationMs, stream: true, body: STREAM_BODY });
    await load(loader.child, job(streamUrl, 500));
    await load(loader.child, job(routerUrl, 500));
    const sd: LoadResult[] = [];
    const sr: LoadResult[] = [];
    for (let round = 0; round < 2; round++) {
      sd.push(await load(loader.child, job(streamUrl, (seconds * 1000) / 2)));
      sr.push(await load(loader.child, job(routerUrl, (seconds * 1000) / 2)));
    }
    const all = (rs: LoadResult[], f: (r: LoadResult) => number[]) => rs.flatMap(f);
    const chunks = (rs: LoadResult[]) => rs.reduce((s, r) => s + r.chunksPerStream, 0) / rs.length;
    const [ttftD, ttftR] = [median(all(sd, (r) => r.ttfts)), median(all(sr, (r) => r.ttfts))];
    const [gapD50, gapR50] = [median(all(sd, (r) => r.gaps)), median(all(sr, (r) => r.gaps))];
    const [gapD99, gapR99] = [
      percentile(
        all(sd, (r) => r.gaps),
        99,
      ),
      percentile(
        all(sr, (r) => r.gaps),
        99,
      ),
    ];
    const gapsKept = Math.abs(gapR50 - gapD50) <= 1 && chunks(sr) >= 0.95 * chunks(sd);

    const routed = peers[1] as Peer;
    const nginxPeer = peers[2];
    console.log('\ntargets');
    if (nginxPeer) {
      const ratio = shareOf(routed) / shareOf(nginxPeer);
      console.log(
        `  ${mark(ratio >= TARGETS.shareOfNginx)} router share of direct / nginx share of direct: ${fixed(ratio, 3)} (target >= ${TARGETS.shareOfNginx})`,
      );
    }
    const added = addedP50(routed);
    console.log(
      `  ${mark(added <= TARGETS.addedP50Ms)} added p50 at c${CONNECTIONS}: ${fixed(added, 3)} ms (target <= ${TARGETS.addedP50Ms} ms)`,
    );
    console.log(
      `  ${mark(ttftR - ttftD <= TARGETS.addedTtftMs)} streaming, added time to first token (p50): ${fixed(ttftR - ttftD, 3)} ms ` +
        `(direct ${fixed(ttftD, 3)}, router ${fixed(ttftR, 3)}; target <= ${TARGETS.addedTtftMs} ms)`,
    );
    console.log(
      `  ${mark(gapsKept)} streaming, inter-chunk gaps preserved: p50 ${fixed(gapD50, 3)} ms direct vs ${fixed(gapR50, 3)} ms router, ` +
        `p99 ${fixed(gapD99, 3)} vs ${fixed(gapR99, 3)}, token chunks per stream ${chunks(sd).toFixed(1)} vs ${chunks(sr).toFixed(1)}`,
    );
    const busy = 3 + routerWorkers;
    if (cpus.length < busy) {
      console.log(`\nnote: ${cpus.length} CPUs for ${busy} busy processes: they compete for cores, so proxies look slower than they are.`);
    }
  } finally {
    await nginx?.stop();
    rmSync(scratch, { recursive: true, force: true });
    stopAll();
  }
}

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
  runRole(process.argv[roleAt + 1] as Role, process.argv.slice(roleAt + 2));
}
