// A deadline at a saturated router, over real HTTP in front of a real fake engine: a request of a
// tenant below its share, which flow control sends at once on a kept slot, is predicted no wait
// for the heavy tenant's line (and admitted), not refused `deadline_unmeetable` as if it waited
// behind that line.
import { afterEach, expect, it } from 'vitest';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { ApiKeys } from '../../router/http/auth.js';
import { StaticRouteSource } from '../../router/routes/table.js';
import { startRouter, type Router } from '../../router/http/server.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const HEAVY = 'key-heavy-0123456789';
const QUIET = 'key-quiet-0123456789';

function ask(base: string, key: string, maxTokens: number, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...headers },
    body: JSON.stringify({ model: 'm', max_tokens: maxTokens, stream: true, messages: [{ role: 'user', content: 'hello' }] }),
  });
}

async function until(check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

const drain = (responses: Array<Promise<Response>>) => Promise.all(responses.map(async (r) => (await r).arrayBuffer()));

it('admits a deadline a kept slot meets while another tenant’s line waits', async () => {
  // 8 slots, one kept while contended; 60 tokens at 100/s hold a slot 600 ms.
  const engine: FakeEngine = await startFakeEngine(fakeEngineOptions({ model: 'm', maxConcurrency: 8, tokensPerSecond: 100 }));
  closers.push(() => engine.close(0));
  const source = new StaticRouteSource([{ servedName: 'm', endpoint: `http://127.0.0.1:${engine.port}` }]);
  const router: Router = await startRouter({
    source,
    port: 0,
    scrapeIntervalMs: 100,
    apiKeys: new ApiKeys([HEAVY, QUIET]),
    log: () => undefined,
  });
  closers.push(() => router.close(0));
  const base = `http://127.0.0.1:${router.port}`;

  // The router learns the engine's slots (and what a request costs) from a scrape during a line.
  const warm = Array.from({ length: 24 }, () => ask(base, HEAVY, 60));
  await new Promise((r) => setTimeout(r, 300));
  await drain(warm);
  await new Promise((r) => setTimeout(r, 300));
  // Two tenants lately: contended, so requests leave only for a free slot and one is kept.
  expect((await ask(base, QUIET, 1)).status).toBe(200);

  const heavy = Array.from({ length: 20 }, () => ask(base, HEAVY, 60));
  await until(() => (router.health().queued.m ?? 0) >= 10);
  // The line's head is heavy's: counted as ahead, with a slot's freeing for itself, it predicted 86 ms.
  const res = await ask(base, QUIET, 4, { 'x-llmgw-slo-ttft-ms': '60' });
  const body = await res.text();
  expect(res.status, body).toBe(200);
  await drain(heavy);
});
