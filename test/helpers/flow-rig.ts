// What the flow-control tests share (test/unit/flow-*.test.ts): a request with a key and flow
// headers, a fake engine whose capacity the router has learned (flow control acts on no guess,
// so the engine must have shown a waiting line once), and the order requests reached the engine.
import type { FakeEngine } from '../../fake-engine/server.js';
import type { Router } from '../../router/http/server.js';
import { engineMetric } from './router-harness.js';
import { waitFor } from './poll.js';

export interface Ask {
  key?: string;
  maxTokens?: number;
  headers?: Record<string, string>;
  /** Told apart at the engine's answer: the prompt is echoed in nothing, so the caller keeps it. */
  content?: string;
}

export function ask(base: string, options: Ask = {}): Promise<Response> {
  const { key, maxTokens = 1, headers = {}, content = 'hello' } = options;
  return fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    body: JSON.stringify({ model: 'demo', max_tokens: maxTokens, messages: [{ role: 'user', content }] }),
  });
}

/**
 * Pushes the engine past its max concurrency long enough for a scrape to show a line, so the
 * router learns its slots; returns once the burst is answered and the engine is idle again.
 */
export async function learnCapacity(base: string, e: FakeEngine, slots: number, key?: string): Promise<void> {
  const burst = Array.from({ length: slots + 3 }, () => ask(base, { key, maxTokens: 5 }));
  for (const res of await Promise.all(burst)) {
    if (res.status !== 200) throw new Error(`warm-up request answered ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  }
  await waitFor(async () => (await engineMetric(e, 'vllm:num_requests_running')) === 0);
  // One more scrape, so that the router's view of the engine is the idle one.
  await new Promise((r) => setTimeout(r, 150));
}

/**
 * Waits until the router's last scrape of its one engine saw `n` requests running: a scrape
 * taken while a request was on its way counts it in flight but not at the engine, and the
 * router takes the slot for free until the next scrape.
 */
export async function running(r: Router, n: number): Promise<void> {
  await waitFor(() => Object.values(r.loadReport().engines)[0]?.running === n);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
