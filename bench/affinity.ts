// `npm run bench:affinity` (node dist/bench/affinity.js [--seconds S] [--rate-shared R] [--rate-uniform R] [--only shared|uniform]):
// what cache-aware routing does to time to first token. Four fake-engine replicas that model a
// prefix cache (an LRU of KV blocks) and prefill (tokens not cached, at a fixed rate, in turn),
// behind the router with each policy in turn — round robin, least-loaded (power of two choices)
// and cache-aware — under the same seeded Poisson arrivals, for two workloads: 16 long system
// prompts shared by many users, and prompts that share nothing. Prints p50/p90 time to first
// token, the engines' prefix-cache hit rate and the spread of requests over replicas. Figures,
// not asserts. Engines (one process), router and load generator run as separate processes.
import { fork, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import { Agent, request } from 'undici';
import { fakeEngineOptions } from '../fake-engine/options.js';
import { startFakeEngine } from '../fake-engine/server.js';
import { Prng } from '../fake-engine/text.js';
import type { Policy } from '../router/pools.js';
import { StaticRouteSource } from '../router/routes.js';
import { startRouter } from '../router/server.js';

const REPLICAS = 4;
/** The engines: a prefill rate, and a cache that holds about half of the sixteen system prompts. */
const ENGINE = { prefillTokensPerSecond: 25_000, prefixCacheBlocks: 750, blockSize: 16, tokensPerSecond: 50, maxConcurrency: 256 };
const SHARED = { prompts: 16, promptWords: 1500, users: 256, questionWords: 60 };
const UNIFORM = { promptWords: 500 };
const MAX_TOKENS = 8;
const WARMUP_S = 2;
const POLICIES: Policy[] = ['round-robin', 'least-loaded', 'cache-aware'];
const GOALS = { ttftP90Better: 3, busiestOverMean: 1.5 };

type Workload = 'shared' | 'uniform';
type Ready = { ports: number[] };

function words(n: number, tag: string): string {
  return Array.from({ length: n }, (_, i) => `${tag}${i.toString(36)}`).join(' ');
}

/** The request bodies of one run, the same for every policy (seeded). */
function* bodies(workload: Workload, seed: number): Generator<string> {
  const prng = new Prng(seed);
  const systems = Array.from({ length: SHARED.prompts }, (_, k) => words(SHARED.promptWords, `s${k}w`));
  for (let n = 0; ; n++) {
    if (workload === 'shared') {
      const user = Math.floor(prng.next() * SHARED.users);
      const messages = [
        { role: 'system', content: systems[user % SHARED.prompts] },
        { role: 'user', content: `${words(SHARED.questionWords, `u${user}q${n}w`)}` },
      ];
      yield JSON.stringify({ model: 'demo', messages, user: `user-${user}`, max_tokens: MAX_TOKENS, stream: true });
    } else {
      const messages = [{ role: 'user', content: words(UNIFORM.promptWords, `r${n}w`) }];
      yield JSON.stringify({ model: 'demo', messages, max_tokens: MAX_TOKENS, stream: true });
    }
  }
}

interface RunResult {
  ttfts: number[];
  errors: number;
  sent: number;
  perReplica: number[];
  hitRate: number;
}

const CONTENT = Buffer.from('"delta":{"content":');

async function oneRequest(url: string, body: string, dispatcher: Agent): Promise<number | undefined> {
  const t0 = performance.now();
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    dispatcher,
  });
  let ttft: number | undefined;
  for await (const chunk of res.body as AsyncIterable<Buffer>)
    if (ttft === undefined && chunk.indexOf(CONTENT) >= 0) ttft = performance.now() - t0;
  return res.statusCode === 200 ? ttft : undefined;
}

async function engineCounters(port: number): Promise<{ requests: number; queries: number; hits: number }> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const read = (name: string) => Number(/ (\S+)$/.exec(text.split('\n').find((l) => l.startsWith(`${name}{`)) ?? ' NaN')?.[1]);
  return {
    requests: read('vllm:request_success_total'),
    queries: read('vllm:prefix_cache_queries_total'),
    hits: read('vllm:prefix_cache_hits_total'),
  };
}

/** Open-loop Poisson arrivals at `rate` per second for `seconds`; TTFTs of requests sent after the warm-up. */
async function drive(url: string, workload: Workload, rate: number, seconds: number, enginePorts: number[]): Promise<RunResult> {
  const dispatcher = new Agent({ connections: null, pipelining: 1, keepAliveTimeout: 4000 });
  const arrivals = new Prng(7);
  const gen = bodies(workload, 11);
  const ttfts: number[] = [];
  let errors = 0;
  let sent = 0;
  const pending: Promise<void>[] = [];
  const start = performance.now();
  let next = start;
  while (next - start < seconds * 1000) {
    const wait = next - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const counted = next - start >= WARMUP_S * 1000;
    const body = gen.next().value as string;
    sent++;
    pending.push(
      oneRequest(url, body, dispatcher).then(
        (ttft) => {
          if (ttft === undefined) errors++;
          else if (counted) ttfts.push(ttft);
        },
        () => void errors++,
      ),
    );
    next += (-Math.log(1 - arrivals.next()) / rate) * 1000;
  }
  await Promise.all(pending);
  await dispatcher.close();
  const counters = await Promise.all(enginePorts.map(engineCounters));
  const queries = counters.reduce((s, c) => s + c.queries, 0);
  const hits = counters.reduce((s, c) => s + c.hits, 0);
  return { ttfts, errors, sent, perReplica: counters.map((c) => c.requests), hitRate: queries > 0 ? hits / queries : NaN };
}

function spawnRole(args: string[]): { child: ChildProcess; ready: Promise<Ready> } {
  const child = fork(__filename, ['--role', ...args], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const ready = new Promise<Ready>((resolve, reject) => {
    child.once('message', (m: Ready) => resolve(m));
    child.once('exit', (code) => reject(new Error(`${args[0] ?? '?'} exited with ${code}`)));
  });
  return { child, ready };
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

function flag(name: string, fallback: number): number {
  const at = process.argv.indexOf(name);
  const value = at > 0 ? Number(process.argv[at + 1]) : fallback;
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} takes a positive number`);
  return value;
}

async function main(): Promise<void> {
  const seconds = flag('--seconds', 20);
  const rates: Record<Workload, number> = { shared: flag('--rate-shared', 70), uniform: flag('--rate-uniform', 120) };
  console.log(`affinity benchmark: ${os.cpus().length} CPUs, node ${process.version}, load ${os.loadavg()[0]?.toFixed(1)}`);
  console.log(
    `${REPLICAS} fake-engine replicas: prefill ${ENGINE.prefillTokensPerSecond} tokens/s each (in turn), prefix cache ${ENGINE.prefixCacheBlocks} blocks of ` +
      `${ENGINE.blockSize} tokens, decode ${ENGINE.tokensPerSecond} tokens/s, ${MAX_TOKENS} tokens per answer; ${seconds} s of Poisson arrivals per run, ` +
      `the first ${WARMUP_S} s not counted`,
  );
  console.log(
    `shared: ${SHARED.prompts} system prompts of ${SHARED.promptWords} tokens, ${SHARED.users} users (each sends its own \`user\`), ${SHARED.questionWords}-token questions, ${rates.shared} req/s; ` +
      `uniform: ${UNIFORM.promptWords}-token prompts sharing nothing, ${rates.uniform} req/s\n`,
  );
  const results = new Map<string, RunResult>();
  const onlyAt = process.argv.indexOf('--only');
  const workloads: Workload[] = onlyAt > 0 ? [process.argv[onlyAt + 1] as Workload] : ['shared', 'uniform'];
  for (const workload of workloads) {
    console.log(`${workload} workload`);
    console.log('  policy          TTFT p50 ms  TTFT p90 ms  cache hit rate  requests per replica          busiest/mean  errors');
    for (const policy of POLICIES) {
      const engines = spawnRole(['engines']);
      const { ports } = await engines.ready;
      const router = spawnRole(['router', policy, ...ports.map(String)]);
      const { ports: routerPorts } = await router.ready;
      try {
        const r = await drive(`http://127.0.0.1:${routerPorts[0]}`, workload, rates[workload], seconds, ports);
        results.set(`${workload}/${policy}`, r);
        const mean = r.perReplica.reduce((s, n) => s + n, 0) / r.perReplica.length;
        console.log(
          `  ${policy.padEnd(14)}  ${percentile(r.ttfts, 50).toFixed(1).padStart(11)}  ${percentile(r.ttfts, 90).toFixed(1).padStart(11)}  ` +
            `${(r.hitRate * 100).toFixed(1).padStart(13)}%  ${r.perReplica.join(' / ').padEnd(28)}  ${(Math.max(...r.perReplica) / mean).toFixed(2).padStart(12)}  ${String(r.errors).padStart(6)}`,
        );
      } finally {
        await stop(router.child);
        await stop(engines.child);
      }
    }
    console.log('');
  }
  if (workloads.length < 2) return;
  const p90 = (key: string) => percentile(results.get(key)?.ttfts ?? [], 90);
  const spread = (key: string) => {
    const per = results.get(key)?.perReplica ?? [];
    return Math.max(...per) / (per.reduce((s, n) => s + n, 0) / per.length);
  };
  const better = p90('shared/least-loaded') / p90('shared/cache-aware');
  const mark = (ok: boolean) => (ok ? 'ok  ' : 'MISS');
  console.log('goals');
  console.log(
    `  ${mark(better >= GOALS.ttftP90Better)} shared prefixes: cache-aware p90 TTFT ${better.toFixed(1)}x better than least-loaded (goal >= ${GOALS.ttftP90Better}x)`,
  );
  console.log(
    `  ${mark(spread('shared/cache-aware') < GOALS.busiestOverMean)} shared prefixes: busiest replica ${spread('shared/cache-aware').toFixed(2)}x the mean (goal < ${GOALS.busiestOverMean}x)`,
  );
  const uniform = p90('uniform/cache-aware') / p90('uniform/least-loaded');
  console.log(`  ${mark(uniform <= 1.1)} uniform prompts: cache-aware p90 TTFT ${uniform.toFixed(2)}x least-loaded's (goal: no worse)`);
}

async function runEngines(): Promise<void> {
  const engines = await Promise.all(
    Array.from({ length: REPLICAS }, () => startFakeEngine(fakeEngineOptions({ model: 'demo', servedModelNames: ['demo'], ...ENGINE }))),
  );
  process.send?.({ ports: engines.map((e) => e.port) } satisfies Ready);
}

async function runRouter(policy: Policy, ports: number[]): Promise<void> {
  const router = await startRouter({
    source: new StaticRouteSource(ports.map((port) => ({ servedName: 'demo', endpoint: `http://127.0.0.1:${port}` }))),
    port: 0,
    policy,
    log: (line) => process.stderr.write(`${line}\n`),
  });
  process.send?.({ ports: [router.port] } satisfies Ready);
}

const roleAt = process.argv.indexOf('--role');
if (roleAt < 0) {
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(`bench:affinity failed: ${(err as Error).stack ?? String(err)}`);
      process.exit(1);
    },
  );
} else {
  process.on('disconnect', () => process.exit(0));
  process.on('SIGTERM', () => process.exit(0));
  const [role, ...rest] = process.argv.slice(roleAt + 1);
  if (role === 'engines') void runEngines();
  else void runRouter(rest[0] as Policy, rest.slice(1).map(Number));
}
