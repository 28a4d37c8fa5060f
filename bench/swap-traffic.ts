// bench:swap's traffic: clients that send streaming chat requests through the router to models
// chosen by a Zipf law, and what each request saw (status, time to first token, time held at the
// router). Figures for bench/swap.ts; nothing here asserts.
import { request } from 'undici';

export interface SentRequest {
  model: string;
  sentAt: number;
  /** When the first streamed chunk came (undefined: none came). */
  firstTokenAt?: number;
  endAt: number;
  status: number | string;
  /** The router's x-llmgw-queued-ms: how long it held the request before sending it. */
  queuedMs: number;
}

/** Model k (0-based) of n is asked with probability ∝ 1 / (k + 1)^s. */
export function zipfPicker(n: number, s: number, random: () => number): () => number {
  const weights = Array.from({ length: n }, (_, k) => 1 / (k + 1) ** s);
  const total = weights.reduce((a, b) => a + b, 0);
  let sum = 0;
  const cumulative = weights.map((w) => (sum += w / total));
  return () => {
    const u = random();
    const k = cumulative.findIndex((c) => u <= c);
    return k === -1 ? n - 1 : k;
  };
}

/** A seeded generator (mulberry32), so both halves of the bench ask for the same sequence of models. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function sendOne(routerUrl: string, model: string, maxTokens: number): Promise<SentRequest> {
  const sentAt = Date.now();
  try {
    const res = await request(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, max_tokens: maxTokens, stream: true, messages: [{ role: 'user', content: 'swap' }] }),
      // A held request may wait for a cold start: the router's own bound (300 s) answers first.
      headersTimeout: 330_000,
      bodyTimeout: 330_000,
    });
    let firstTokenAt: number | undefined;
    let text = '';
    for await (const chunk of res.body) {
      if (firstTokenAt === undefined && res.statusCode === 200 && String(chunk).includes('data:')) firstTokenAt = Date.now();
      if (res.statusCode !== 200) text += String(chunk);
    }
    // A refusal says why in its error's code (queue_timeout, no_replica_ready, …).
    const code = res.statusCode === 200 ? undefined : (/"code"\s*:\s*"([^"]+)"/.exec(text)?.[1] ?? text.slice(0, 80));
    return {
      model,
      sentAt,
      firstTokenAt,
      endAt: Date.now(),
      status: code ? `${res.statusCode} ${code}` : res.statusCode,
      queuedMs: Number(res.headers['x-llmgw-queued-ms'] ?? 0),
    };
  } catch (err) {
    return { model, sentAt, endAt: Date.now(), status: (err as Error).message, queuedMs: 0 };
  }
}

/**
 * `clients` loops, each sending one request at a time (then `thinkMs`) until `durationMs` has
 * passed, to `models[pick()]`. Returns every request, in the order they ended.
 */
export async function driveZipf(options: {
  routerUrl: string;
  models: string[];
  clients: number;
  durationMs: number;
  thinkMs: number;
  maxTokens: number;
  seed: number;
}): Promise<SentRequest[]> {
  const random = seeded(options.seed);
  const pick = zipfPicker(options.models.length, 1.0, random);
  const until = Date.now() + options.durationMs;
  const done: SentRequest[] = [];
  const client = async (): Promise<void> => {
    while (Date.now() < until) {
      done.push(await sendOne(options.routerUrl, options.models[pick()]!, options.maxTokens));
      await new Promise((resolve) => setTimeout(resolve, options.thinkMs * (0.5 + random())));
    }
  };
  await Promise.all(Array.from({ length: options.clients }, client));
  return done;
}
