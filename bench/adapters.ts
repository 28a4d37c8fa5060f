// `npm run bench:adapters` (node dist/bench/adapters.js [--seconds S]): what adapter-aware
// routing does for LoRA adapters. Four fake-engine replicas of one base, each holding at most
// 10 adapters and taking 0.3 s to load one, serve 50 adapters under the same seeded Poisson
// arrivals with Zipf-distributed adapter popularity, behind the router twice: adapter-aware
// (to a replica that holds the adapter; load on the least-loaded one when none does; hot ones
// spread) and by load alone (load the adapter wherever the request lands, LRU-unloading there).
// Prints p50/p90 time to first token, loads and unloads per minute side by side. Figures, not
// asserts. Engines, router and load generator share this process (fresh engines per run).
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { fakeEngineOptions } from '../fake-engine/options.js';
import { startFakeEngine } from '../fake-engine/server.js';
import { Prng } from '../fake-engine/text.js';
import type { AdapterSpec } from '../router/adapters/catalog.js';
import { StaticRouteSource } from '../router/routes/table.js';
import { startRouter } from '../router/http/server.js';
import { numberFlag } from './cli.js';
import { percentile } from './workloads.js';

const REPLICAS = 4;
const ADAPTERS = 50;
const ZIPF_S = 1.1;
const RATE = 40;
const WARMUP_S = 3;
const MAX_TOKENS = 8;
const ENGINE = { maxConcurrency: 8, tokensPerSecond: 100, lora: { maxLoras: 10, maxLoraRank: 16, loadTimeS: 0.3 } };
/** The goal: at least 3x fewer loads, and a better p90. */
const GOAL_FEWER_LOADS = 3;

type Mode = 'adapter-aware' | 'load-only';

interface RunResult {
  ttfts: number[];
  errors: number;
  loads: number;
  unloads: number;
  minutes: number;
}

/** Seeded Zipf sampler over ranks 0..n-1 (rank 0 the hottest). */
function zipf(n: number, s: number, rng: Prng): () => number {
  const cumulative: number[] = [];
  let total = 0;
  for (let k = 1; k <= n; k++) cumulative.push((total += 1 / Math.pow(k, s)));
  return () => {
    const u = rng.next() * total;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((cumulative[mid] as number) < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

async function metric(admin: string, prefix: string): Promise<number> {
  const text = await (await fetch(`${admin}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(prefix))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

/** Milliseconds to the first streamed byte; undefined for an error answer. */
async function oneRequest(url: string, model: string, dispatcher: Agent): Promise<number | undefined> {
  const started = performance.now();
  const body = JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: MAX_TOKENS, stream: true });
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json' },
    dispatcher,
  });
  let ttft: number | undefined;
  for await (const chunk of res.body) {
    if (ttft === undefined && (chunk as Buffer).length > 0) ttft = performance.now() - started;
  }
  return res.statusCode === 200 ? ttft : undefined;
}

async function run(mode: Mode, specs: AdapterSpec[], seconds: number): Promise<RunResult> {
  const engines = await Promise.all(
    Array.from({ length: REPLICAS }, () => startFakeEngine(fakeEngineOptions({ model: 'base', servedModelNames: ['base'], ...ENGINE }))),
  );
  const catalog = new Map([['base', specs]]);
  const router = await startRouter({
    source: new StaticRouteSource(engines.map((e) => ({ servedName: 'base', endpoint: `http://127.0.0.1:${e.port}` }))),
    port: 0,
    admin: { host: '127.0.0.1', port: 0 },
    adapters: () => catalog,
    adapterRouting: { ignoreLoaded: mode === 'load-only' },
    log: () => undefined,
  });
  const url = `http://127.0.0.1:${router.port}`;
  const admin = `http://127.0.0.1:${router.adminPort ?? 0}`;
  const dispatcher = new Agent({ connections: null, keepAliveTimeout: 4000 });
  const arrivals = new Prng(7);
  const pick = zipf(specs.length, ZIPF_S, new Prng(11));
  const ttfts: number[] = [];
  let errors = 0;
  let loadsAtWarm = 0;
  let unloadsAtWarm = 0;
  const pending: Promise<void>[] = [];
  const start = performance.now();
  let warm = false;
  let next = start;
  try {
    while (next - start < seconds * 1000) {
      const wait = next - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const counted = next - start >= WARMUP_S * 1000;
      if (counted && !warm) {
        warm = true;
        loadsAtWarm = await metric(admin, 'llmgw_router_adapter_loads_total');
        unloadsAtWarm = await metric(admin, 'llmgw_router_adapter_unloads_total');
      }
      const model = (specs[pick()] as AdapterSpec).name;
      pending.push(
        oneRequest(url, model, dispatcher).then(
          (ttft) => {
            if (ttft === undefined) errors++;
            else if (counted) ttfts.push(ttft);
          },
          () => void errors++,
        ),
      );
      next += (-Math.log(1 - arrivals.next()) / RATE) * 1000;
    }
    await Promise.all(pending);
    const minutes = (performance.now() - start - WARMUP_S * 1000) / 60_000;
    const loads = (await metric(admin, 'llmgw_router_adapter_loads_total')) - loadsAtWarm;
    const unloads = (await metric(admin, 'llmgw_router_adapter_unloads_total')) - unloadsAtWarm;
    return { ttfts, errors, loads, unloads, minutes };
  } finally {
    await dispatcher.close();
    await router.close(0);
    await Promise.all(engines.map((e) => e.close(0)));
  }
}

async function main(): Promise<void> {
  const seconds = numberFlag('--seconds', 20);
  const dir = mkdtempSync(join(os.tmpdir(), 'llmgw-bench-adapters-'));
  try {
    const specs: AdapterSpec[] = Array.from({ length: ADAPTERS }, (_, i) => {
      const source = join(dir, `ft-${i}`);
      mkdirSync(source);
      return { name: `ft-${i}`, source };
    });
    console.log(`adapters benchmark: ${os.cpus().length} CPUs, node ${process.version}, load ${os.loadavg()[0]?.toFixed(1)}`);
    console.log(
      `${REPLICAS} fake-engine replicas of one base: ${ENGINE.lora.maxLoras} adapter slots each, ${ENGINE.lora.loadTimeS} s per load, ` +
        `${ENGINE.maxConcurrency} requests at once, ${ENGINE.tokensPerSecond} tokens/s, ${MAX_TOKENS} tokens per answer`,
    );
    console.log(
      `${ADAPTERS} adapters, Zipf s=${ZIPF_S} popularity, ${RATE} req/s Poisson for ${seconds} s per run, the first ${WARMUP_S} s not counted\n`,
    );
    console.log('  routing         TTFT p50 ms  TTFT p90 ms  loads/min  unloads/min  errors');
    const results = new Map<Mode, RunResult>();
    for (const mode of ['load-only', 'adapter-aware'] as const) {
      const r = await run(mode, specs, seconds);
      results.set(mode, r);
      console.log(
        `  ${mode.padEnd(14)}  ${percentile(r.ttfts, 50).toFixed(1).padStart(11)}  ${percentile(r.ttfts, 90).toFixed(1).padStart(11)}  ` +
          `${(r.loads / r.minutes).toFixed(0).padStart(9)}  ${(r.unloads / r.minutes).toFixed(0).padStart(11)}  ${String(r.errors).padStart(6)}`,
      );
    }
    const aware = results.get('adapter-aware') as RunResult;
    const blind = results.get('load-only') as RunResult;
    const fewer = blind.loads / Math.max(1, aware.loads);
    const p90 = percentile(blind.ttfts, 90) / percentile(aware.ttfts, 90);
    const mark = (ok: boolean) => (ok ? 'ok  ' : 'MISS');
    console.log('\ngoals');
    console.log(
      `  ${mark(fewer >= GOAL_FEWER_LOADS)} ${fewer.toFixed(1)}x fewer loads with adapter-aware routing (goal >= ${GOAL_FEWER_LOADS}x)`,
    );
    console.log(`  ${mark(p90 > 1)} p90 TTFT ${p90.toFixed(1)}x better with adapter-aware routing (goal: better)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(`bench:adapters failed: ${(err as Error).stack ?? String(err)}`);
    process.exit(1);
  },
);
