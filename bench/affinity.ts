// `npm run bench:affinity` (node dist/bench/affinity.js [--engine fake|llamacpp] [--seconds S]
// [--only chats|hot|uniform]): what cache-aware routing does to time to first token. Replicas
// behind the router with each policy in turn, least-loaded (power of two choices) and
// cache-aware, under the same seeded Poisson arrivals. With `--engine fake` (the default) four
// fake-engine replicas that model a prefix cache (an LRU of KV blocks), serial prefill and a
// limit of 4 requests at once (bench/workloads.ts), for three workloads: multi-turn chats over
// six long system prompts, one hot system prompt shared by every request at twice one engine's
// capacity, and prompts that share nothing. With `--engine llamacpp` (bench/affinity-llamacpp.ts;
// [--replicas N] [--parallel N] [--cache-ram MIB] [--rate R]) real llama-server replicas on this
// CPU serve the chats. Prints p50/p90 time to first token, the engines' prefix-cache hit rate and
// the spread of requests over replicas. Figures, not asserts. Engines, router and load generator
// run as separate processes.
import type { ChildProcess } from 'node:child_process';
import os from 'node:os';
import type { PolicyName as Policy } from '../router/policies/index.js';
import { StaticRouteSource } from '../router/routes/table.js';
import { startRouter } from '../router/http/server.js';
import { forkRole, numberFlag, runMainOrRole } from './cli.js';
import { runLlamacpp, type RouterProcess } from './affinity-llamacpp.js';
import {
  busiestOverMean,
  drive,
  ENGINE,
  MAX_TOKENS,
  percentile,
  REPLICAS,
  startEngines,
  WORKLOADS,
  type RunResult,
  type Workload,
} from './workloads.js';

const POLICIES: Policy[] = ['least-loaded', 'cache-aware'];
/** The goals: chats >= 3x better than least-loaded; the hot prefix at most 1.2x least-loaded's p90. */
const GOALS = { chatsBetter: 3, hotWorse: 1.2, uniformWorse: 1.1 };

type Ready = { ports: number[] };

const spawnRole = (args: string[]) => forkRole<Ready>(__filename, args);

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

function option(name: string, fallback: string): string {
  const at = process.argv.indexOf(name);
  return at > 0 ? (process.argv[at + 1] ?? fallback) : fallback;
}

/** The router in its own process, with its admin listener (affinity counters) and x-llmgw-endpoint on. */
async function routerProcess(policy: Policy, ports: number[]): Promise<RouterProcess> {
  const router = spawnRole(['router', policy, '--observe', ...ports.map(String)]);
  const { ports: at } = await router.ready;
  return { url: `http://127.0.0.1:${at[0]}`, admin: `http://127.0.0.1:${at[1]}`, stop: () => stop(router.child) };
}

async function main(): Promise<void> {
  const engine = option('--engine', 'fake');
  if (engine !== 'fake' && engine !== 'llamacpp') throw new Error(`--engine takes fake or llamacpp, not ${engine}`);
  console.log(`affinity benchmark: ${os.cpus().length} CPUs, node ${process.version}, load ${os.loadavg()[0]?.toFixed(1)}`);
  if (engine === 'llamacpp') {
    // One thread a replica: two replicas fill a 2-core machine; rate and length were measured
    // there (docs/routing-policies.md). --cache-ram 0: by default llama-server keeps 8 GiB of prompt
    // states in host memory, room for every prompt this bench sends a 270M model, so each
    // replica would hold everything after one miss of each and placement would hardly matter;
    // with its slots alone the cache is smaller than the working set, as a GPU's KV cache is.
    const settings = {
      replicas: numberFlag('--replicas', 2, 1),
      parallel: numberFlag('--parallel', 2, 1),
      cacheRamMiB: numberFlag('--cache-ram', 0, -1),
      seconds: numberFlag('--seconds', 75),
      rate: numberFlag('--rate', 0.5),
    };
    await runLlamacpp(settings, POLICIES, routerProcess);
    return;
  }
  const seconds = numberFlag('--seconds', 15);
  console.log(
    `${REPLICAS} fake-engine replicas: ${ENGINE.maxConcurrency} requests at once, prefill ${ENGINE.prefillTokensPerSecond} tokens/s each (in turn), prefix cache ${ENGINE.prefixCacheBlocks} blocks of ` +
      `${ENGINE.blockSize} tokens, decode ${ENGINE.tokensPerSecond} tokens/s, ${MAX_TOKENS} tokens per answer; ${seconds} s of Poisson arrivals per run`,
  );
  const onlyAt = process.argv.indexOf('--only');
  const workloads: Workload[] = onlyAt > 0 ? [process.argv[onlyAt + 1] as Workload] : ['chats', 'hot', 'uniform'];
  for (const w of workloads)
    console.log(`  ${w}: ${WORKLOADS[w].describe}, ${WORKLOADS[w].rate} req/s, the first ${WORKLOADS[w].warmupS} s not counted`);
  console.log('');
  const results = new Map<string, RunResult>();
  for (const workload of workloads) {
    console.log(`${workload} workload`);
    console.log('  policy          TTFT p50 ms  TTFT p90 ms  cache hit rate  requests per replica          busiest/mean  errors');
    for (const policy of POLICIES) {
      const engines = spawnRole(['engines']);
      const { ports } = await engines.ready;
      const router = spawnRole(['router', policy, ...ports.map(String)]);
      const { ports: routerPorts } = await router.ready;
      try {
        const r = await drive(`http://127.0.0.1:${routerPorts[0]}`, workload, seconds, ports);
        results.set(`${workload}/${policy}`, r);
        console.log(
          `  ${policy.padEnd(14)}  ${percentile(r.ttfts, 50).toFixed(1).padStart(11)}  ${percentile(r.ttfts, 90).toFixed(1).padStart(11)}  ` +
            `${(r.hitRate * 100).toFixed(1).padStart(13)}%  ${r.perReplica.join(' / ').padEnd(28)}  ${busiestOverMean(r.perReplica).toFixed(2).padStart(12)}  ${String(r.errors).padStart(6)}`,
        );
      } finally {
        await stop(router.child);
        await stop(engines.child);
      }
    }
    console.log('');
  }
  const p90 = (key: string) => percentile(results.get(key)?.ttfts ?? [], 90);
  const mark = (ok: boolean) => (ok ? 'ok  ' : 'MISS');
  console.log('goals');
  if (results.has('chats/cache-aware')) {
    const better = p90('chats/least-loaded') / p90('chats/cache-aware');
    console.log(
      `  ${mark(better >= GOALS.chatsBetter)} chats: cache-aware p90 TTFT ${better.toFixed(1)}x better than least-loaded (goal >= ${GOALS.chatsBetter}x)`,
    );
  }
  if (results.has('hot/cache-aware')) {
    const hot = p90('hot/cache-aware') / p90('hot/least-loaded');
    console.log(
      `  ${mark(hot <= GOALS.hotWorse)} hot prefix: cache-aware p90 TTFT ${hot.toFixed(2)}x least-loaded's (goal <= ${GOALS.hotWorse}x)`,
    );
  }
  if (results.has('uniform/cache-aware')) {
    const uniform = p90('uniform/cache-aware') / p90('uniform/least-loaded');
    console.log(
      `  ${mark(uniform <= GOALS.uniformWorse)} uniform prompts: cache-aware p90 TTFT ${uniform.toFixed(2)}x least-loaded's (goal: no worse)`,
    );
  }
}

async function runEngines(): Promise<void> {
  const engines = await startEngines();
  process.send?.({ ports: engines.map((e) => e.port) } satisfies Ready);
}

async function runRouter(policy: Policy, ports: number[], observe: boolean): Promise<void> {
  const router = await startRouter({
    source: new StaticRouteSource(ports.map((port) => ({ servedName: 'demo', endpoint: `http://127.0.0.1:${port}` }))),
    port: 0,
    policy,
    // The llama.cpp run counts requests per replica from x-llmgw-endpoint and reads the affinity counters.
    ...(observe ? { debugHeaders: true, admin: { host: '127.0.0.1', port: 0 } } : {}),
    log: (line) => process.stderr.write(`${line}\n`),
  });
  process.send?.({ ports: [router.port, ...(router.adminPort === undefined ? [] : [router.adminPort])] } satisfies Ready);
}

runMainOrRole('bench:affinity', main, (role, rest) => {
  if (role === 'engines') void runEngines();
  else {
    const observe = rest.includes('--observe');
    void runRouter(
      rest[0] as Policy,
      rest
        .slice(1)
        .filter((a) => a !== '--observe')
        .map(Number),
      observe,
    );
  }
});
