// bench:affinity with real engines (`--engine llamacpp`): llama.cpp's llama-server replicas
// serving Gemma 3 270M on this CPU, multi-turn chats over long shared system prompts, routed
// by least-loaded and by cache-aware in turn; prints TTFT and the prompt tokens each policy got
// from the engines' prompt caches (llamacpp:prompt_tokens_cached_total). Figures, not asserts.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { findLlamaServer, LLAMA_SERVER_MISSING } from '../agent/engines/llamacpp-binary.js';
import { signalGroup } from '../agent/supervisor/processes/proc.js';
import { GEMMA_FILE, gemmaModelDir } from '../common/gemma-gguf.js';
import { findFreePort } from '../common/ports.js';
import { Prng, TOKEN_TEXT } from '../fake-engine/text.js';
import type { PolicyName as Policy } from '../router/policies/index.js';
import { percentile, streamChat } from './workloads.js';

/**
 * Sized for a 270M model on one thread per replica (prefill about 250 tokens/s on the 2-core
 * machine): a first turn of ~460 tokens costs ~1.8 s to prefill cold and 0.2-0.5 s for its new
 * turn when cached, so a hit shows in TTFT; 8-token answers keep decode (~50 ms a token) small.
 * Four prompts, two slots a replica: the working set does not fit one replica's slots but does
 * fit the fleet's, which is where placement matters.
 */
export const LLAMA_CHATS = { prompts: 4, promptWords: 400, users: 16, turns: 4, questionWords: 20, answerWords: 8, maxTokens: 8 };

export interface LlamaSettings {
  replicas: number;
  /** Slots per replica (--parallel): requests at once, and prompts kept in its KV cache. */
  parallel: number;
  /** llama-server --cache-ram (MiB): its host-memory prompt cache beside the slots; 0 turns it off. */
  cacheRamMiB: number;
  seconds: number;
  /** Requests a second, Poisson. */
  rate: number;
}

export interface RouterProcess {
  url: string;
  /** The router's admin listener, for its llmgw_router_affinity_total. */
  admin: string;
  stop(): Promise<void>;
}

interface Replica {
  pid: number;
  port: number;
  stop(): Promise<void>;
}

/** Process groups still running: killed if the bench itself is interrupted. */
const live = new Set<number>();

function killAll(): void {
  for (const pgid of live) signalGroup(pgid, 'SIGKILL');
}

async function startReplica(binary: string, gguf: string, s: LlamaSettings): Promise<Replica> {
  const port = await findFreePort();
  mkdirSync(join('.llmgw', 'bench'), { recursive: true });
  const logFile = join('.llmgw', 'bench', `llama-server-${port}.log`);
  const log = openSync(logFile, 'w');
  const args = [
    ...['-m', gguf, '--alias', 'demo', '--host', '127.0.0.1', '--port', String(port), '--metrics', '--threads', '1'],
    ...['--parallel', String(s.parallel), '--ctx-size', String(2048 * s.parallel), '--cache-ram', String(s.cacheRamMiB)],
    // The AMX repack kernels crash in VMs that do not grant the tile state (docs/engines.md).
    '--no-repack',
  ];
  // Its own process group, so stopping it signals that group and nothing this bench did not start.
  const child = spawn(binary, args, { stdio: ['ignore', log, log], detached: true });
  closeSync(log);
  const pid = child.pid;
  if (pid === undefined) throw new Error(`cannot start ${binary}`);
  live.add(pid);
  let gone: string | undefined;
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      gone = `exit ${code ?? signal}`;
      live.delete(pid);
      resolve();
    }),
  );
  const stop = async () => {
    if (gone !== undefined) return;
    signalGroup(pid, 'SIGTERM');
    const timer = setTimeout(() => signalGroup(pid, 'SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    const ok = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1000) }).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return { pid, port, stop };
    if (gone !== undefined || Date.now() > deadline) {
      await stop();
      throw new Error(`llama-server on port ${port} did not get ready (${gone ?? 'timeout'}); see ${logFile}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** llama.cpp's prompt counters: prompt_tokens_total leaves out the tokens found in the cache. */
async function promptCounters(port: number): Promise<{ evaluated: number; cached: number }> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const read = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return { evaluated: read('llamacpp:prompt_tokens_total'), cached: read('llamacpp:prompt_tokens_cached_total') };
}

/** The router's cache-aware placements (home, new, diverted); least-loaded keeps no homes and counts none. */
async function affinityPicks(admin: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${admin}/metrics`)).text();
  const picks: Record<string, number> = { home: 0, new: 0, diverted: 0 };
  for (const m of text.matchAll(/^llmgw_router_affinity_total\{[^}]*result="(\w+)"[^}]*\} (\S+)$/gm)) picks[m[1] as string] = Number(m[2]);
  return picks;
}

interface Message {
  role: string;
  content: string;
}

/** Seeded text of common words (about one token each), so prompt sizes are known in tokens. */
function text(prng: Prng, n: number): string {
  return Array.from({ length: n }, () => TOKEN_TEXT[128 + Math.floor(prng.next() * 128)] as string)
    .join('')
    .trim();
}

/** The chats, the same for every policy: a user's next turn repeats its history, as a chat client does. */
function* chatRequests(seed: number): Generator<{ messages: Message[]; body: string }> {
  const c = LLAMA_CHATS;
  const prng = new Prng(seed);
  const systems = Array.from({ length: c.prompts }, () => text(prng, c.promptWords));
  const chats = Array.from({ length: c.users }, () => ({ generation: 0, history: [] as Message[] }));
  for (;;) {
    const u = Math.floor(prng.next() * c.users);
    const chat = chats[u] as (typeof chats)[number];
    if (chat.history.length >= 2 * c.turns) {
      chat.generation++;
      chat.history = [];
    }
    const messages = [
      { role: 'system', content: systems[u % c.prompts] as string },
      ...chat.history,
      { role: 'user', content: text(prng, c.questionWords) },
    ];
    // A fixed answer rather than the model's: the bodies must not depend on the policy.
    chat.history.push(messages.at(-1) as Message, { role: 'assistant', content: text(prng, c.answerWords) });
    const body = JSON.stringify({ model: 'demo', messages, user: `user-${u}-${chat.generation}`, max_tokens: c.maxTokens, stream: true });
    yield { messages, body };
  }
}

interface Sent {
  /** Undefined: the request failed. */
  ttft?: number | undefined;
  endpoint: string;
  prompt: string;
}

/** Streams one request; TTFT is its first content chunk (the end of the stream if the answer was empty). */
async function send(url: string, body: string, dispatcher: Agent): Promise<{ ttft?: number; endpoint: string }> {
  const r = await streamChat(url, body, dispatcher);
  return { ...(r.status === 200 ? { ttft: r.ttft ?? r.total } : {}), endpoint: r.endpoint };
}

/** Open-loop Poisson arrivals through the router; every request counted (each policy starts cold). */
async function drive(url: string, s: LlamaSettings): Promise<Sent[]> {
  const dispatcher = new Agent({ connections: null, pipelining: 1, keepAliveTimeout: 4000 });
  const arrivals = new Prng(7);
  const gen = chatRequests(11);
  const sent: Promise<Sent>[] = [];
  const start = performance.now();
  let next = start;
  while (next - start < s.seconds * 1000) {
    const wait = next - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const { messages, body } = gen.next().value as { messages: Message[]; body: string };
    const prompt = JSON.stringify(messages);
    sent.push(
      send(url, body, dispatcher).then(
        (r) => ({ ...r, prompt }),
        () => ({ ttft: undefined, endpoint: '?', prompt }),
      ),
    );
    next += (-Math.log(1 - arrivals.next()) / s.rate) * 1000;
  }
  const all = await Promise.all(sent);
  await dispatcher.close();
  return all;
}

function commonPrefix(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

/**
 * The share of prompt characters an unbounded cache on each replica would have held, given where
 * the router sent each request (in arrival order): what routing made possible, for the engines'
 * own counters to be read against.
 */
function placementShare(all: readonly Sent[]): number {
  const seen = new Map<string, string[]>();
  let hit = 0;
  let total = 0;
  for (const r of all) {
    const before = seen.get(r.endpoint) ?? [];
    hit += before.reduce((best, p) => Math.max(best, commonPrefix(p, r.prompt)), 0);
    total += r.prompt.length;
    seen.set(r.endpoint, [...before, r.prompt]);
  }
  return total > 0 ? hit / total : NaN;
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

export async function runLlamacpp(
  s: LlamaSettings,
  policies: readonly Policy[],
  startRouterProcess: (policy: Policy, ports: number[]) => Promise<RouterProcess>,
): Promise<void> {
  const binary = await findLlamaServer();
  const gguf = process.env.LLMGW_GEMMA_GGUF ?? join(gemmaModelDir(), GEMMA_FILE);
  if (binary === undefined) throw new Error(LLAMA_SERVER_MISSING);
  if (!existsSync(gguf))
    throw new Error(`no Gemma 3 270M GGUF at ${gguf}: run \`llmgw engines install llamacpp\` (or set LLMGW_GEMMA_GGUF)`);
  for (const signal of ['SIGINT', 'SIGTERM'] as const)
    process.once(signal, () => {
      killAll();
      process.exit(130);
    });
  const c = LLAMA_CHATS;
  console.log(
    `${s.replicas} llama-server replicas (${binary}, Gemma 3 270M Q4_K_M): 1 thread, ${s.parallel} slots, --cache-ram ${s.cacheRamMiB} MiB each, ` +
      `new processes for each policy (cold caches); ${c.users} users in chats of up to ${c.turns} turns over ${c.prompts} system prompts of ` +
      `${c.promptWords} words (~1 token each), ${c.questionWords}-word questions, ${c.maxTokens} tokens per answer; ${s.rate} req/s Poisson for ${s.seconds} s`,
  );
  console.log('');
  console.log(
    '  policy          requests  TTFT p50 ms  TTFT p90 ms  cached (engines)  placement allows  router home/new/diverted  requests per replica  errors  load',
  );
  for (const policy of policies) {
    const replicas: Replica[] = [];
    let router: RouterProcess | undefined;
    try {
      for (let i = 0; i < s.replicas; i++) replicas.push(await startReplica(binary, gguf, s));
      const before = await Promise.all(replicas.map((r) => promptCounters(r.port)));
      router = await startRouterProcess(
        policy,
        replicas.map((r) => r.port),
      );
      const all = await drive(router.url, s);
      const after = await Promise.all(replicas.map((r) => promptCounters(r.port)));
      const picks = await affinityPicks(router.admin);
      let cached = 0;
      let evaluated = 0;
      after.forEach((a, i) => {
        cached += a.cached - (before[i]?.cached ?? 0);
        evaluated += a.evaluated - (before[i]?.evaluated ?? 0);
      });
      const ttfts = all.flatMap((r) => (r.ttft === undefined ? [] : [r.ttft]));
      const perReplica = replicas.map((r) => all.filter((x) => x.endpoint.endsWith(`:${r.port}`)).length);
      console.log(
        `  ${policy.padEnd(14)}  ${String(all.length).padStart(8)}  ${percentile(ttfts, 50).toFixed(0).padStart(11)}  ${percentile(ttfts, 90).toFixed(0).padStart(11)}  ` +
          `${pct(cached / (cached + evaluated)).padStart(16)}  ${pct(placementShare(all)).padStart(16)}  ${(policy === 'cache-aware' ? `${picks.home} / ${picks.new} / ${picks.diverted}` : '-').padStart(24)}  ` +
          `${perReplica.join(' / ').padStart(20)}  ${String(all.length - ttfts.length).padStart(6)}  ${(loadavg()[0] ?? NaN).toFixed(1).padStart(4)}`,
      );
      console.log(`    prompt tokens: ${cached} cached + ${evaluated} evaluated`);
    } finally {
      await router?.stop();
      await Promise.all(replicas.map((r) => r.stop()));
    }
  }
  console.log('');
  console.log(
    'cached (engines): llamacpp:prompt_tokens_cached_total / (prompt_tokens_total + cached), the change over the run, all replicas',
  );
  console.log(
    'placement allows: the share of prompt text an unbounded cache on each replica would have held, given where each request went',
  );
}
