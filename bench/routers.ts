// `npm run bench:routers` (node dist/bench/routers.js [--seconds S] [--only WORKLOAD] [--routers K,K]): llmgw's
// router against vLLM's own (`vllm-router` 0.1.17 from PyPI, installed by this bench into
// .llmgw/vllm-router with pip) on the same fake engines (prefix cache, serial prefill, 4 requests
// at once: bench/workloads.ts) and the same seeded loads, one router after another: multi-turn
// chats, one hot prefix at twice one engine's capacity, prompts that share nothing, a burst.
// Then each router's CPU per request and added p50 in front of an instant engine under wrk.
// Figures, not asserts. Engines, routers and the load generator are separate processes.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { findFreePort, isPortFree } from '../common/ports.js';
import { fakeEngineOptions } from '../fake-engine/options.js';
import { startFakeEngine } from '../fake-engine/server.js';
import { StaticRouteSource } from '../router/routes/table.js';
import { startRouter } from '../router/http/server.js';
import { forkRole, numberFlag, runMainOrRole } from './cli.js';
import { cpuSeconds, onPath, runWrk, writeWrkScript } from './router-peers.js';
import { busiestOverMean, drive, percentile, startEngines, WORKLOADS, type RunResult, type Workload } from './workloads.js';

const VLLM_ROUTER = { version: '0.1.17', venv: join('.llmgw', 'vllm-router') };
const KV_OFFSET = 1000;
type RouterKind = 'llmgw' | 'llmgw-kv' | 'vllm-cache_aware' | 'vllm-power_of_two';
const ROUTERS: RouterKind[] = ['llmgw', 'llmgw-kv', 'vllm-cache_aware', 'vllm-power_of_two'];
const LABEL: Record<RouterKind, string> = {
  llmgw: 'llmgw (approximate)',
  'llmgw-kv': 'llmgw (KV events)',
  'vllm-cache_aware': 'vllm-router cache_aware',
  'vllm-power_of_two': 'vllm-router power_of_two',
};
const WRK_BODY = JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'How fast is the router?' }], max_tokens: 16 });

interface Ready {
  ports: number[];
  pids: number[];
}

const spawnRole = (args: string[]) => forkRole<Ready>(__filename, args);

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill('SIGKILL'), 3000);
    child.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/** vllm-router's executable, installed into its own venv on first use; undefined (and why) when it cannot be. */
function vllmRouter(): { bin?: string; why?: string } {
  const bin = join(VLLM_ROUTER.venv, 'bin', 'vllm-router');
  if (existsSync(bin)) return { bin };
  console.log(`installing vllm-router ${VLLM_ROUTER.version} into ${VLLM_ROUTER.venv} (pip)…`);
  const venv = spawnSync('python3', ['-m', 'venv', VLLM_ROUTER.venv], { stdio: 'inherit' });
  if (venv.status !== 0) return { why: 'python3 -m venv failed' };
  const pip = spawnSync(join(VLLM_ROUTER.venv, 'bin', 'pip'), ['install', '-q', `vllm-router==${VLLM_ROUTER.version}`], {
    stdio: 'inherit',
  });
  return pip.status === 0 && existsSync(bin) ? { bin } : { why: 'pip install vllm-router failed' };
}

async function waitHttp(url: string, ms: number, child: ChildProcess): Promise<void> {
  const t0 = performance.now();
  while (performance.now() - t0 < ms && child.exitCode === null) {
    try {
      const res = await fetch(url);
      await res.text();
      if (res.status < 500) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer within ${ms} ms (exit code ${child.exitCode})`);
}

/** Starts one router in front of `ports`; its URL and process ids. */
async function startOne(
  kind: RouterKind,
  ports: number[],
  bin: string | undefined,
): Promise<{ url: string; pids: number[]; child: ChildProcess }> {
  if (kind === 'llmgw' || kind === 'llmgw-kv') {
    const r = spawnRole(['router', kind, ...ports.map(String)]);
    const ready = await r.ready;
    return { url: `http://127.0.0.1:${ready.ports[0]}`, pids: ready.pids, child: r.child };
  }
  const port = await findFreePort();
  const policy = kind === 'vllm-cache_aware' ? 'cache_aware' : 'power_of_two';
  const args = ['--host', '127.0.0.1', '--port', String(port), '--policy', policy, '--log-level', 'error', '--worker-urls'];
  const child = spawn(bin as string, [...args, ...ports.map((p) => `http://127.0.0.1:${p}`)], { stdio: ['ignore', 'ignore', 'inherit'] });
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}/health`, 30_000, child);
  return { url, pids: [child.pid as number], child };
}

const f1 = (v: number) => (Number.isFinite(v) ? v.toFixed(1) : 'n/a');

async function main(): Promise<void> {
  const seconds = numberFlag('--seconds', 8);
  const onlyAt = process.argv.indexOf('--only');
  const workloads: Workload[] = onlyAt > 0 ? [process.argv[onlyAt + 1] as Workload] : ['chats', 'hot', 'uniform', 'burst'];
  const { bin, why } = vllmRouter();
  const routersAt = process.argv.indexOf('--routers');
  const picked = routersAt > 0 ? (process.argv[routersAt + 1] ?? '').split(',') : ROUTERS;
  const routers = ROUTERS.filter((k) => picked.includes(k) && (bin !== undefined || !k.startsWith('vllm')));
  console.log(
    `routers benchmark: ${os.cpus().length} CPUs, node ${process.version}, load ${os.loadavg()[0]?.toFixed(1)}; ${seconds} s a run`,
  );
  if (why !== undefined) console.log(`vllm-router not run: ${why}`);
  console.log(
    "vllm-router kv_aware not run: it names blocks by the model tokenizer's token ids (it loads one from Hugging Face or VLLM_ROUTER_TOKENIZER), and the fake engine has words, not a tokenizer; its events name blocks by hashes of words\n",
  );
  const table: string[] = [];
  const results = new Map<string, RunResult>();
  for (const workload of workloads) {
    console.log(`${workload}: ${WORKLOADS[workload].describe}, ${WORKLOADS[workload].rate} req/s`);
    for (const kind of routers) {
      const engines = spawnRole(['engines']);
      const { ports } = await engines.ready;
      const router = await startOne(kind, ports, bin);
      try {
        const r = await drive(router.url, workload, seconds, ports);
        results.set(`${workload}/${kind}`, r);
        const line =
          `${workload.padEnd(8)} ${LABEL[kind].padEnd(26)} ${f1(percentile(r.ttfts, 50)).padStart(7)} ${f1(percentile(r.ttfts, 90)).padStart(7)} ` +
          `${f1(percentile(r.ttfts, 99)).padStart(7)} ${f1(r.ttfts.length / r.seconds).padStart(9)} ${busiestOverMean(r.perReplica).toFixed(2).padStart(12)} ${String(r.errors).padStart(6)}`;
        table.push(line);
        console.log(`  ${line}`);
      } finally {
        await stop(router.child);
        await stop(engines.child);
      }
    }
  }
  console.log('\nworkload router                     TTFT ms p50     p90     p99  req/s done  busiest/mean errors');
  for (const line of table) console.log(line);

  console.log('\ngoals (p90 TTFT against the best vllm-router policy on each workload: no worse, better somewhere)');
  for (const workload of workloads) {
    const p90 = (k: RouterKind) => percentile(results.get(`${workload}/${k}`)?.ttfts ?? [], 90);
    const best = Math.min(p90('vllm-cache_aware'), p90('vllm-power_of_two'));
    const ratios = (['llmgw', 'llmgw-kv'] as const).map((k) => `${LABEL[k]} ${f1(p90(k))} ms (${(p90(k) / best).toFixed(2)}x)`);
    const worst = Math.max(p90('llmgw'), p90('llmgw-kv')) / best;
    console.log(`  ${worst <= 1 ? 'ok  ' : 'MISS'} ${workload}: best vllm-router ${f1(best)} ms; ${ratios.join(', ')}`);
  }
  await instantEngine(routers, bin);
}

/** Each router in front of one instant engine under wrk: CPU per request and added p50 (alternating rounds). */
async function instantEngine(routers: RouterKind[], bin: string | undefined): Promise<void> {
  const wrk = onPath('wrk');
  if (wrk === undefined) return console.log('\nwrk not on PATH: no instant-engine comparison');
  const scratch = mkdtempSync(join(os.tmpdir(), 'llmgw-bench-routers-'));
  const engine = spawnRole(['instant']);
  const { ports } = await engine.ready;
  const direct = `http://127.0.0.1:${ports[0]}`;
  const script = writeWrkScript(scratch, WRK_BODY);
  console.log(
    '\ninstant engines (two, one process), wrk -t1 -c32, 3 rounds of 3 s each, direct (one engine) and through each router in turn',
  );
  console.log('router                       req/s   p50 ms  added p50  CPU/request');
  try {
    for (const kind of routers.filter((k) => k !== 'llmgw-kv')) {
      const router = await startOne(kind, ports, bin);
      try {
        await runWrk(wrk, script, `${router.url}/v1/chat/completions`, 32, 1);
        const added: number[] = [];
        let cpu = 0;
        let requests = 0;
        let rps = 0;
        let p50 = 0;
        for (let round = 0; round < 3; round++) {
          const d = await runWrk(wrk, script, `${direct}/v1/chat/completions`, 32, 3);
          const c0 = cpuSeconds(router.pids);
          const r = await runWrk(wrk, script, `${router.url}/v1/chat/completions`, 32, 3);
          cpu += cpuSeconds(router.pids) - c0;
          requests += r.requests;
          added.push(r.p50 - d.p50);
          rps += r.requests / r.seconds / 3;
          p50 += r.p50 / 3;
        }
        console.log(
          `${LABEL[kind].padEnd(26)} ${rps.toFixed(0).padStart(7)}  ${p50.toFixed(3).padStart(7)}  ${percentile(added, 50).toFixed(3).padStart(9)}  ${((cpu / requests) * 1e6).toFixed(0).padStart(8)} µs`,
        );
      } finally {
        await stop(router.child);
      }
    }
  } finally {
    await stop(engine.child);
    rmSync(scratch, { recursive: true, force: true });
  }
}

async function runRoleMain(role: string, rest: string[]): Promise<void> {
  if (role === 'engines') {
    // Every engine publishes KV events at its HTTP port + KV_OFFSET (llmgw --kv-events +1000).
    // Each engine's HTTP port P and its events' P + KV_OFFSET, both free.
    const reserved: number[] = [];
    for (let tries = 0; reserved.length < 4 && tries < 100; tries++) {
      const port = await findFreePort();
      if (port + KV_OFFSET <= 65535 && !reserved.includes(port) && (await isPortFree(port + KV_OFFSET))) reserved.push(port);
    }
    const engines = await startEngines((i) => ({
      port: reserved[i] as number,
      kvEvents: { endpoint: `tcp://127.0.0.1:${(reserved[i] as number) + KV_OFFSET}`, topic: '' },
    }));
    process.send?.({ ports: engines.map((e) => e.port), pids: [process.pid] } satisfies Ready);
  } else if (role === 'instant') {
    // Two engines: vllm-router's power_of_two refuses to start with one.
    const engines = await Promise.all([0, 1].map(() => startFakeEngine(fakeEngineOptions({ model: 'demo', servedModelNames: ['demo'] }))));
    process.send?.({ ports: engines.map((e) => e.port), pids: [process.pid] } satisfies Ready);
  } else {
    const ports = rest.slice(1).map(Number);
    const router = await startRouter({
      source: new StaticRouteSource(ports.map((port) => ({ servedName: 'demo', endpoint: `http://127.0.0.1:${port}` }))),
      port: 0,
      kvEvents: rest[0] === 'llmgw-kv' ? `+${KV_OFFSET}` : undefined,
      log: () => {},
    });
    process.send?.({ ports: [router.port], pids: [process.pid] } satisfies Ready);
  }
}

runMainOrRole('bench:routers', main, (role, rest) => void runRoleMain(role, rest));
