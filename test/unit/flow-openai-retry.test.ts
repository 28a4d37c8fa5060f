// Flow control's 429s as the official `openai` client sees them (issue 39, point 4): a full line
// answers queue_full with Retry-After, which the client's own retry waits out before the
// request succeeds; a deadline no replica can meet answers deadline_unmeetable, with Retry-After
// and OpenAI's error shape. A real router in front of a real fake engine over HTTP.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { engine, router, routerMetric, url, useRouterHarness } from '../helpers/router-harness.js';
import { waitFor } from '../helpers/poll.js';
import { ask, learnCapacity, running } from '../helpers/flow-rig.js';

useRouterHarness();

/** One slot, 50 tokens a second; a line of one request at the router, held as soon as no slot is free. */
async function saturable() {
  const e = await engine({ maxConcurrency: 1, tokensPerSecond: 50 });
  const r = await router([{ servedName: 'demo', endpoint: url(e) }], {
    scrapeIntervalMs: 50,
    queue: { maxPerModel: 1, saturatedWaiting: 0 },
  });
  await learnCapacity(r.base, e, 1);
  return r;
}

/** Each attempt the client makes: when it left, and what came back. */
interface Attempt {
  at: number;
  status: number;
  retryAfter: string | null;
}

function countingClient(base: string, maxRetries: number, attempts: Attempt[]): OpenAI {
  return new OpenAI({
    baseURL: `${base}/v1`,
    apiKey: 'unused',
    maxRetries,
    fetch: async (input: string | URL | Request, init?: RequestInit) => {
      const at = performance.now();
      const res = await fetch(input, init);
      attempts.push({ at, status: res.status, retryAfter: res.headers.get('retry-after') });
      return res;
    },
  });
}

describe('a full line through the openai client', () => {
  it('answers 429 queue_full with Retry-After, and the client’s retry waits it out and then succeeds', async () => {
    const { base, admin, router: r } = await saturable();
    // The engine's one slot taken for 0.8 s, and the router's line of one filled behind it.
    const holder = ask(base, { maxTokens: 40 });
    await running(r, 1);
    const queued = ask(base);
    await waitFor(() => r.health().queued.demo === 1);

    const once: Attempt[] = [];
    const refused = await countingClient(base, 0, once)
      .chat.completions.create({ model: 'demo', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] })
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    const error = refused as InstanceType<typeof OpenAI.RateLimitError>;
    expect(error.status).toBe(429);
    expect(error.code).toBe('queue_full');
    expect(error.type).toBe('requests');
    expect(error.headers?.get('retry-after')).toBe('1');

    // The same call with the client's own retry: refused once, retried no sooner than Retry-After.
    const attempts: Attempt[] = [];
    const completion = await countingClient(base, 1, attempts).chat.completions.create({
      model: 'demo',
      max_tokens: 2,
      messages: [{ role: 'user', content: 'hi again' }],
    });
    expect(completion.choices[0]?.message.content).toBeTruthy();
    expect(attempts.map((a) => a.status)).toEqual([429, 200]);
    const [first, second] = attempts as [Attempt, Attempt];
    const retryAfterMs = Number(first.retryAfter) * 1000;
    expect(retryAfterMs).toBeGreaterThanOrEqual(1000);
    // The SDK's own backoff without Retry-After is 0.375 to 0.5 s: this gap is the header's.
    expect(second.at - first.at).toBeGreaterThanOrEqual(retryAfterMs);
    // The router saw both refusals (the first client's and the first attempt) and nothing more.
    expect(
      await routerMetric(admin, 'llmgw_router_flow_refused_total{model="demo",tenant="(none)",priority="standard",reason="full"}'),
    ).toBe(2);
    for (const res of await Promise.all([holder, queued])) {
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
  });
});

describe('a deadline no replica can meet through the openai client', () => {
  it('answers 429 deadline_unmeetable at once, with Retry-After and the predicted TTFT in OpenAI’s shape', async () => {
    const { base, router: r } = await saturable();
    const holder = ask(base, { maxTokens: 40 });
    await running(r, 1);
    const attempts: Attempt[] = [];
    const refused = await countingClient(base, 0, attempts)
      .chat.completions.create(
        { model: 'demo', max_tokens: 1, messages: [{ role: 'user', content: 'now' }] },
        { headers: { 'x-llmgw-slo-ttft-ms': '1' } },
      )
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    const error = refused as InstanceType<typeof OpenAI.RateLimitError>;
    expect(error.code).toBe('deadline_unmeetable');
    expect(error.type).toBe('requests');
    expect(error.param).toBeNull();
    expect(error.message).toMatch(/predicted first token in \d+ ms \(asked 1 ms\)/);
    expect(Number(error.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(attempts).toHaveLength(1);
    await (await holder).arrayBuffer();
  });
});
