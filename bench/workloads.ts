// The routing benchmarks' engines and loads, shared by bench:affinity and bench:routers: fake
// engines that model a prefix cache, serial prefill and a limited number of requests at once, and
// seeded open-loop workloads (multi-turn chats over shared system prompts, one hot shared prefix,
// prompts that share nothing, a burst) with the time to first token of every request. Bench side.
import { Agent, request } from 'undici';
import { fakeEngineOptions, type FakeEngineOptions } from '../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../fake-engine/server.js';
import { Prng } from '../fake-engine/text.js';

export const REPLICAS = 4;
/**
 * Each engine runs 4 requests at once and decodes 100 tokens/s: with 8-token answers one engine
 * serves about 50 requests a second. Prefill is 25,000 tokens/s, one prompt after another; the
 * cache (400 blocks of 16) holds about four of the chats' system prompts.
 */
export const ENGINE = {
  prefillTokensPerSecond: 25_000,
  prefixCacheBlocks: 400,
  blockSize: 16,
  tokensPerSecond: 100,
  maxConcurrency: 4,
} as const;
export const MAX_TOKENS = 8;
/** Requests a second one engine can serve when every prompt is cached. */
export const ENGINE_CAPACITY = ENGINE.maxConcurrency / (MAX_TOKENS / ENGINE.tokensPerSecond);

export type Workload = 'chats' | 'hot' | 'uniform' | 'burst';

export interface WorkloadSpec {
  /** Requests a second while it runs. */
  rate: number;
  /** Seconds of idle before the load starts (the burst's step). */
  idleS: number;
  /** Requests sent in the first seconds are not counted (caches and load readings settle). */
  warmupS: number;
  describe: string;
}

export const CHATS = { prompts: 6, promptWords: 1500, users: 48, turns: 6, questionWords: 40, answerWords: MAX_TOKENS };
export const HOT = { promptWords: 1500, questionWords: 60 };
export const UNIFORM = { promptWords: 500 };

export const WORKLOADS: Record<Workload, WorkloadSpec> = {
  chats: {
    rate: 60,
    idleS: 0,
    warmupS: 2,
    describe: `${CHATS.users} users in multi-turn chats (up to ${CHATS.turns} turns) over ${CHATS.prompts} system prompts of ${CHATS.promptWords} tokens`,
  },
  hot: {
    rate: 2 * ENGINE_CAPACITY,
    idleS: 0,
    warmupS: 2,
    describe: `one system prompt of ${HOT.promptWords} tokens shared by every request, at twice one engine's capacity`,
  },
  uniform: { rate: 80, idleS: 0, warmupS: 2, describe: `${UNIFORM.promptWords}-token prompts that share nothing` },
  burst: {
    rate: 3 * ENGINE_CAPACITY,
    idleS: 1,
    warmupS: 0,
    describe: `idle, then the chats at 3x one engine's capacity, every request counted`,
  },
};

function words(n: number, tag: string): string {
  return Array.from({ length: n }, (_, i) => `${tag}${i.toString(36)}`).join(' ');
}

interface Message {
  role: string;
  content: string;
}

/** The request bodies of one run, the same for every router (seeded). */
export function* bodies(workload: Workload, seed: number, model = 'demo'): Generator<string> {
  const prng = new Prng(seed);
  const systems = Array.from({ length: CHATS.prompts }, (_, k) => words(CHATS.promptWords, `s${k}w`));
  const hot = words(HOT.promptWords, 'hotw');
  const chats = Array.from({ length: CHATS.users }, () => ({ generation: 0, history: [] as Message[] }));
  const body = (messages: Message[], user?: string) =>
    JSON.stringify({ model, messages, ...(user === undefined ? {} : { user }), max_tokens: MAX_TOKENS, stream: true });
  for (let n = 0; ; n++) {
    if (workload === 'chats' || workload === 'burst') {
      const u = Math.floor(prng.next() * CHATS.users);
      const chat = chats[u] as (typeof chats)[number];
      if (chat.history.length >= 2 * CHATS.turns) {
        chat.generation++;
        chat.history = [];
      }
      const question = { role: 'user', content: words(CHATS.questionWords, `u${u}g${chat.generation}t${chat.history.length}w`) };
      const messages = [{ role: 'system', content: systems[u % CHATS.prompts] as string }, ...chat.history, question];
      chat.history.push(question, { role: 'assistant', content: words(CHATS.answerWords, `a${u}g${chat.generation}n${n}w`) });
      yield body(messages, `user-${u}-${chat.generation}`);
    } else if (workload === 'hot') {
      yield body([
        { role: 'system', content: hot },
        { role: 'user', content: words(HOT.questionWords, `q${n}w`) },
      ]);
    } else yield body([{ role: 'user', content: words(UNIFORM.promptWords, `r${n}w`) }]);
  }
}

export interface RunResult {
  ttfts: number[];
  errors: number;
  sent: number;
  seconds: number;
  perReplica: number[];
  hitRate: number;
}

// With the opening quote: llama.cpp's first chunk may carry `"content":null`, which is no token yet.
const CONTENT = Buffer.from('"delta":{"content":"');

/** One streamed chat through the router: its status, time to the first content chunk (if any) and to the end, and who served it. */
export async function streamChat(
  url: string,
  body: string,
  dispatcher: Agent,
): Promise<{ status: number; ttft: number | undefined; total: number; endpoint: string }> {
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
  return { status: res.statusCode, ttft, total: performance.now() - t0, endpoint: String(res.headers['x-llmgw-endpoint'] ?? '?') };
}

async function oneRequest(url: string, body: string, dispatcher: Agent): Promise<number | undefined> {
  const r = await streamChat(url, body, dispatcher);
  return r.status === 200 ? r.ttft : undefined;
}

export interface EngineCounters {
  requests: number;
  queries: number;
  hits: number;
}

export async function engineCounters(port: number): Promise<EngineCounters> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const read = (name: string) => Number(/ (\S+)$/.exec(text.split('\n').find((l) => l.startsWith(`${name}{`)) ?? ' NaN')?.[1]);
  return {
    requests: read('vllm:request_success_total'),
    queries: read('vllm:prefix_cache_queries_total'),
    hits: read('vllm:prefix_cache_hits_total'),
  };
}

/** Open-loop Poisson arrivals of one workload for `seconds` (after its idle step); TTFTs of the requests counted. */
export async function drive(url: string, workload: Workload, seconds: number, enginePorts: number[]): Promise<RunResult> {
  const spec = WORKLOADS[workload];
  const dispatcher = new Agent({ connections: null, pipelining: 1, keepAliveTimeout: 4000 });
  const arrivals = new Prng(7);
  const gen = bodies(workload, 11);
  const ttfts: number[] = [];
  /** Arrival second of each counted TTFT, for LLMGW_BENCH_SERIES (p90 by second, to see transients). */
  const at: number[] = [];
  let errors = 0;
  let sent = 0;
  const pending: Promise<void>[] = [];
  if (spec.idleS > 0) await new Promise((r) => setTimeout(r, spec.idleS * 1000));
  const start = performance.now();
  let next = start;
  while (next - start < seconds * 1000) {
    const wait = next - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const counted = next - start >= spec.warmupS * 1000;
    const second = Math.floor((next - start) / 1000);
    const body = gen.next().value as string;
    sent++;
    pending.push(
      oneRequest(url, body, dispatcher).then(
        (ttft) => {
          if (ttft === undefined) errors++;
          else if (counted) {
            ttfts.push(ttft);
            at.push(second);
          }
        },
        () => void errors++,
      ),
    );
    next += (-Math.log(1 - arrivals.next()) / spec.rate) * 1000;
  }
  await Promise.all(pending);
  const elapsed = (performance.now() - start) / 1000;
  if (process.env.LLMGW_BENCH_SERIES === '1') {
    const bySecond = new Map<number, number[]>();
    at.forEach((s, i) => bySecond.set(s, [...(bySecond.get(s) ?? []), ttfts[i] as number]));
    console.log(`    p90 by second: ${[...bySecond].map(([s, v]) => `${s}:${percentile(v, 90).toFixed(0)}`).join(' ')}`);
  }
  await dispatcher.close();
  const counters = await Promise.all(enginePorts.map(engineCounters));
  const queries = counters.reduce((s, c) => s + c.queries, 0);
  const hits = counters.reduce((s, c) => s + c.hits, 0);
  return {
    ttfts,
    errors,
    sent,
    seconds: elapsed,
    perReplica: counters.map((c) => c.requests),
    hitRate: queries > 0 ? hits / queries : NaN,
  };
}

/** The benchmark's engines in this process; `extra` adds options (KV events). */
export function startEngines(extra: (i: number) => Partial<FakeEngineOptions> = () => ({})): Promise<FakeEngine[]> {
  return Promise.all(
    Array.from({ length: REPLICAS }, (_, i) =>
      startFakeEngine(fakeEngineOptions({ model: 'demo', servedModelNames: ['demo'], ...ENGINE, ...extra(i) })),
    ),
  );
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

/** The busiest replica's requests over the mean. */
export function busiestOverMean(perReplica: readonly number[]): number {
  const mean = perReplica.reduce((s, n) => s + n, 0) / perReplica.length;
  return Math.max(...perReplica) / mean;
}
