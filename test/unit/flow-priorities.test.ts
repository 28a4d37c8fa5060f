// Priorities and deadlines through a real router in front of a real fake engine over HTTP (issue
// 39): a critical request at a full line sheds the newest sheddable one and is served, and is
// refused only when nothing lower is held; x-llmgw-priority only lowers; a deadline no replica
// is predicted to meet is refused at once, naming the prediction; the admin /health shows the
// line by tenant and priority. One engine slot, so the order requests are answered in is the
// order they left the router's line.
import { describe, expect, it } from 'vitest';
import { ApiKeys } from '../../router/http/auth.js';
import { PRIORITIES } from '../../router/flow/priority.js';
import type { Fairness } from '../../router/flow/queue.js';
import { engine, router, routerMetric, url, useRouterHarness } from '../helpers/router-harness.js';
import { waitFor } from '../helpers/poll.js';
import { ask, learnCapacity, running } from '../helpers/flow-rig.js';

useRouterHarness();

const CRIT = 'sk-crit-0123456789';
const STD = 'sk-std-0123456789';
const SHED = 'sk-shed-0123456789';
const HOLD = 'sk-hold-0123456789';
const keys = () =>
  new ApiKeys([
    { key: CRIT, id: 'ops-key', tenant: 'ops', priority: PRIORITIES.critical },
    { key: STD, id: 'web-key', tenant: 'web' },
    { key: SHED, id: 'batch-key', tenant: 'batch', priority: PRIORITIES.sheddable },
    { key: HOLD, id: 'hold-key', tenant: 'hold' },
  ]);

/** One engine slot at 20 tokens a second, its capacity learned; a line of `maxPerModel` at the router. */
async function saturable(maxPerModel: number, fairness: Fairness = 'weighted') {
  const e = await engine({ maxConcurrency: 1, tokensPerSecond: 20 });
  const r = await router([{ servedName: 'demo', endpoint: url(e) }], {
    apiKeys: keys(),
    scrapeIntervalMs: 50,
    queue: { maxPerModel, saturatedWaiting: 0, fairness },
  });
  await learnCapacity(r.base, e, 1, HOLD);
  /** The slot taken for a second by a request of its own tenant. */
  const occupy = async () => {
    const holder = ask(r.base, { key: HOLD, maxTokens: 20 });
    await running(r.router, 1);
    // Wrapped: an async function returning the promise itself would wait for the answer.
    return { holder };
  };
  /** Sends one request and waits until the router holds it (so that arrival order is known). */
  const hold = async (options: Parameters<typeof ask>[1]) => {
    const before = r.router.health().queued.demo ?? 0;
    const answer = ask(r.base, options);
    await waitFor(() => (r.router.health().queued.demo ?? 0) > before);
    return { answer };
  };
  return { e, ...r, occupy, hold };
}

async function refusal(res: Response): Promise<{ status: number; retryAfter: number; code: string; message: string }> {
  const body = (await res.json()) as { error: { code: string; message: string } };
  return { status: res.status, retryAfter: Number(res.headers.get('retry-after')), ...body.error };
}

describe('a full line', () => {
  it('sheds its newest sheddable request for a critical one, and refuses critical only when nothing lower is held', async () => {
    const { router: r, occupy, hold, base } = await saturable(2);
    const { holder } = await occupy();
    const { answer: older } = await hold({ key: SHED });
    const { answer: newer } = await hold({ key: SHED });

    const firstCritical = ask(base, { key: CRIT });
    // The newest sheddable one gives up its place, told why; the older one still waits.
    expect(await refusal(await newer)).toMatchObject({
      status: 429,
      code: 'queue_full',
      message: expect.stringContaining('priority (sheddable) is the lowest'),
    });
    expect(r.health().line.demo?.classes).toEqual(
      expect.arrayContaining([
        { tenant: 'ops', priority: 'critical', held: 1, inflight: 0 },
        { tenant: 'batch', priority: 'sheddable', held: 1, inflight: 0 },
      ]),
    );
    const secondCritical = ask(base, { key: CRIT });
    expect(await refusal(await older)).toMatchObject({ status: 429, code: 'queue_full' });
    await waitFor(() => r.health().line.demo?.classes.length === 1);

    // Only critical requests are held now: a third critical one, or a standard one, is refused itself.
    for (const key of [CRIT, STD]) {
      const refused = await refusal(await ask(base, { key }));
      expect(refused).toMatchObject({ status: 429, code: 'queue_full' });
      expect(refused.message).not.toContain('priority');
      expect(refused.retryAfter).toBeGreaterThanOrEqual(1);
    }
    for (const res of await Promise.all([holder, firstCritical, secondCritical])) {
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
  });
});

describe('x-llmgw-priority', () => {
  it('cannot raise a request above its key, lowers it below, and /health shows the line by tenant and priority', async () => {
    const { admin, occupy, hold } = await saturable(10);
    const { holder } = await occupy();
    const order: string[] = [];
    const answered = (name: string, res: Promise<Response>) =>
      res.then(async (r) => {
        expect(r.status).toBe(200);
        await r.arrayBuffer();
        order.push(name);
      });
    // In arrival order: a standard key asking critical, a critical key asking sheddable, a
    // critical request, and a plain standard one.
    const raised = answered('raised', (await hold({ key: STD, headers: { 'x-llmgw-priority': 'critical' } })).answer);
    const lowered = answered('lowered', (await hold({ key: CRIT, headers: { 'x-llmgw-priority': 'sheddable' } })).answer);
    const critical = answered('critical', (await hold({ key: CRIT })).answer);
    const standard = answered('standard', (await hold({ key: STD })).answer);

    const health = (await (await fetch(`${admin}/health`)).json()) as { line: Record<string, { held: number; classes: unknown[] }> };
    expect(health.line.demo?.held).toBe(4);
    expect(health.line.demo?.classes).toEqual(
      expect.arrayContaining([
        { tenant: 'ops', priority: 'critical', held: 1, inflight: 0 },
        { tenant: 'web', priority: 'standard', held: 2, inflight: 0 },
        { tenant: 'ops', priority: 'sheddable', held: 1, inflight: 0 },
      ]),
    );
    expect(health.line.demo?.classes).toHaveLength(3);

    await Promise.all([holder.then((r) => r.arrayBuffer()), raised, lowered, critical, standard]);
    // The standard key's ask for critical waited behind the other key's critical request, and the
    // critical key's ask for sheddable behind every standard one.
    expect(order).toEqual(['critical', 'raised', 'standard', 'lowered']);
  });

  it('shows held requests by their own tenant under first come first served too', async () => {
    const { router: r, occupy, hold } = await saturable(10, 'fifo');
    const { holder } = await occupy();
    const waiting = [(await hold({ key: STD })).answer, (await hold({ key: HOLD })).answer];
    expect(r.health().line.demo?.classes).toEqual(
      expect.arrayContaining([
        { tenant: 'web', priority: 'standard', held: 1, inflight: 0 },
        { tenant: 'hold', priority: 'standard', held: 1, inflight: 1 },
      ]),
    );
    for (const res of await Promise.all([holder, ...waiting])) await res.arrayBuffer();
  });

  it('answers 400 invalid_header for a priority that is not one', async () => {
    const e = await engine();
    const { base } = await router([{ servedName: 'demo', endpoint: url(e) }], { apiKeys: keys() });
    const res = await ask(base, { key: STD, headers: { 'x-llmgw-priority': 'urgent' } });
    expect(await refusal(res)).toMatchObject({ status: 400, code: 'invalid_header', message: expect.stringContaining('x-llmgw-priority') });
  });
});

describe('a deadline for the first token', () => {
  it('is refused within 50 ms, naming the predicted TTFT, when no replica can meet it, and served when one can', async () => {
    const { admin, occupy, base } = await saturable(10);
    const { holder } = await occupy();
    // The engine's one slot is busy for a second: 200 ms is out of reach, 30 s is not.
    const startedAt = performance.now();
    const refused = await ask(base, { key: STD, headers: { 'x-llmgw-slo-ttft-ms': '200' } });
    const tookMs = performance.now() - startedAt;
    const { status, code, message, retryAfter } = await refusal(refused);
    expect({ status, code }).toEqual({ status: 429, code: 'deadline_unmeetable' });
    expect(tookMs).toBeLessThan(50);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    const predicted = Number(/predicted first token in (\d+) ms \(asked 200 ms\)/.exec(message)?.[1]);
    expect(predicted).toBeGreaterThan(200);

    const feasible = await ask(base, { key: STD, headers: { 'x-llmgw-slo-ttft-ms': '30000' } });
    expect(feasible.status).toBe(200);
    await feasible.arrayBuffer();
    await (await holder).arrayBuffer();
    // Idle again, the same 200 ms is within reach and is served.
    const idle = await ask(base, { key: STD, headers: { 'x-llmgw-slo-ttft-ms': '200' } });
    expect(idle.status).toBe(200);
    await idle.arrayBuffer();
    const series = (outcome: string) => `llmgw_router_deadlines_total{model="demo",tenant="web",priority="standard",outcome="${outcome}"}`;
    expect(await routerMetric(admin, series('refused'))).toBe(1);
    expect(await routerMetric(admin, series('met'))).toBe(2);
  });
});
