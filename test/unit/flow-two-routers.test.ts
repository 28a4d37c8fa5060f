// Two routers in front of one deployment (issue 39, point 5): two tenants weighted 3:1, both
// backlogged, each spreading its requests over both routers. What the design promises there
// (docs/flow-control.md, "Several routers"): each router orders its own line by start-time fair
// queueing, so at each router, over any stretch where both tenants have requests held there,
// sent_a/w_a - sent_b/w_b stays within 1/w_a + 1/w_b; the engine's slots go to whichever router
// finds one free, so the deployment's share is the sum of the routers' shares and is held to
// 3:1 only as closely as each router's share is and the routers' arrivals are even.
import type { Registry } from 'prom-client';
import { describe, expect, it, onTestFinished } from 'vitest';
import { ApiKeys } from '../../router/http/auth.js';
import { engine, router, url, useRouterHarness, type Running } from '../helpers/router-harness.js';
import { waitFor } from '../helpers/poll.js';
import { ask, sleep } from '../helpers/flow-rig.js';

useRouterHarness();

const A = 'sk-tenant-a-0123456789';
const B = 'sk-tenant-b-0123456789';
const WEIGHTS = { a: 3, b: 1 } as const;
/** The SFQ bound on sent_a/w_a - sent_b/w_b while both are backlogged at one router. */
const BOUND = 1 / WEIGHTS.a + 1 / WEIGHTS.b;
const keys = () =>
  new ApiKeys([
    { key: A, tenant: 'a', weight: WEIGHTS.a },
    { key: B, tenant: 'b', weight: WEIGHTS.b },
  ]);

/** Requests of each tenant this router has sent from its line: its wait histogram's counts. */
async function sentFromLine(registry: Registry): Promise<{ a: number; b: number }> {
  const metric = registry.getSingleMetric('llmgw_router_flow_wait_seconds');
  const out = { a: 0, b: 0 };
  // A histogram's values carry the name of the series each is (_bucket, _sum, _count).
  const values = ((await metric?.get())?.values ?? []) as Array<{ metricName?: string; labels: Record<string, unknown>; value: number }>;
  for (const v of values)
    if (v.metricName === 'llmgw_router_flow_wait_seconds_count' && (v.labels.tenant === 'a' || v.labels.tenant === 'b'))
      out[v.labels.tenant] += v.value;
  return out;
}

/** Both tenants have requests held at this router now. */
function bothHeld(r: Running): boolean {
  const classes = r.router.health().line.demo?.classes ?? [];
  return ['a', 'b'].every((t) => classes.some((c) => c.tenant === t && c.held > 0));
}

describe('two routers in front of one deployment', () => {
  it('keeps each router within the SFQ bound and the deployment near 3:1 while both tenants are backlogged', async () => {
    // Four slots of 50 ms (5 tokens at 100 a second): about 80 requests a second in all.
    const e = await engine({ maxConcurrency: 4, tokensPerSecond: 100 });
    const options = { apiKeys: keys(), scrapeIntervalMs: 50, queue: { saturatedWaiting: 0 } };
    const routes = [{ servedName: 'demo', endpoint: url(e) }];
    const routers = [await router(routes, options), await router(routes, options)] as const;
    // Both routers learn the engine's four slots from a line it shows while both send.
    await Promise.all(
      routers.flatMap((r) => Array.from({ length: 6 }, () => ask(r.base, { key: A, maxTokens: 10 }).then((res) => res.arrayBuffer()))),
    );
    await sleep(150);

    // Sixteen clients per tenant, each sending one request after another, the tenant's requests
    // alternating routers: thirty-two outstanding against four slots keeps both tenants held.
    let load = true;
    const done = { a: [] as number[], b: [] as number[] };
    const turns = { a: 0, b: 0 };
    const failed: number[] = [];
    const client = async (key: string, tenant: 'a' | 'b') => {
      while (load) {
        const res = await ask(routers[turns[tenant]++ % 2]!.base, { key, maxTokens: 5 }).catch(() => undefined);
        await res?.arrayBuffer();
        if (res?.status === 200) done[tenant].push(performance.now());
        else if (load) failed.push(res?.status ?? 0);
      }
    };
    const clients = [...Array.from({ length: 16 }, () => client(A, 'a')), ...Array.from({ length: 16 }, () => client(B, 'b'))];
    // However the test ends, the clients stop before the routers close.
    onTestFinished(async () => {
      load = false;
      await Promise.all(clients);
    });
    await waitFor(() => routers.every(bothHeld));

    // Samples every 20 ms for 3 s: each router's sends since the start of its current stretch of
    // both tenants held (a stretch ends at a sample that finds one of them not held).
    const worst = [0, 0];
    const stretches = [0, 0];
    const starts: Array<{ a: number; b: number } | undefined> = [undefined, undefined];
    const from = performance.now();
    const before = await Promise.all(routers.map((r) => sentFromLine(r.router.registry)));
    const last = [...before];
    while (performance.now() - from < 3000) {
      for (const [i, r] of routers.entries()) {
        const sent = await sentFromLine(r.router.registry);
        last[i] = sent;
        if (!bothHeld(r)) starts[i] = undefined;
        else if (starts[i] === undefined) {
          starts[i] = sent;
          stretches[i]!++;
        } else {
          const start = starts[i]!;
          const gap = Math.abs((sent.a - start.a) / WEIGHTS.a - (sent.b - start.b) / WEIGHTS.b);
          worst[i] = Math.max(worst[i]!, gap);
        }
      }
      await sleep(20);
    }
    const to = performance.now();
    expect(failed).toEqual([]);

    for (const i of [0, 1]) {
      // Each router served both tenants in the window, and its worst gap stayed within the bound
      // (measured: 1.0 or 1.333 of 1.333; with fairness 'fifo' it grows with every request).
      expect(last[i]!.a - before[i]!.a).toBeGreaterThan(30);
      expect(last[i]!.b - before[i]!.b).toBeGreaterThan(10);
      expect(stretches[i]).toBeGreaterThan(0);
      expect(worst[i]).toBeLessThanOrEqual(BOUND + 1e-9);
    }
    // The deployment's share over the measured window: completions of each tenant in it.
    const within = (ts: number[]) => ts.filter((t) => t >= from && t <= to).length;
    const a = within(done.a);
    const b = within(done.b);
    const share = a / (a + b);
    // 3:1 is a share of 0.75. Measured 0.705 to 0.761 over ten runs on a loaded 2-core machine:
    // below 0.75 because b's requests are served at a router while a's have bunched at the other
    // (each router is work-conserving, and slots go to whichever finds them free), which no
    // single router's order can correct. 0.07 either side (a:b from 2.1:1 to 4.6:1) holds that
    // with room, and still tells weighted from unweighted: first come first served gives 0.5.
    expect(Math.abs(share - 0.75)).toBeLessThanOrEqual(0.07);
  });
});
