// The router's waiting line in front of real fake engines over real HTTP, routes given by hand:
// requests for an autoscaled deployment at zero are held (the model still listed) and served
// once a replica is routable; over the limits a clean 429 or 503 with Retry-After; with every
// replica saturated requests wait at the router, API keys taking turns; and the autoscaler sends
// a count only when it changes, and one wake for many held requests.
import { afterEach, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { autoscalePolicy, type AutoscaleSettings } from '../../common/autoscale.js';
import type { AutoscaleDecision } from '../../common/replica-types.js';
import { fakeEngineOptions, type FakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { ApiKeys } from '../../router/http/auth.js';
import { Autoscaler } from '../../router/autoscale/autoscaler.js';
import type { DeploymentControl } from '../../router/autoscale/temporal.js';
import { StaticRouteSource, type DeploymentEntry } from '../../router/routes/table.js';
import { startRouter, type Router, type RouterOptions } from '../../router/http/server.js';

const engines: FakeEngine[] = [];
const routers: Router[] = [];
const stops: Array<() => void> = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) stop();
  await Promise.all(routers.splice(0).map((r) => r.close(0)));
  await Promise.all(engines.splice(0).map((e) => e.close(0)));
});

async function engine(overrides: Partial<FakeEngineOptions> = {}): Promise<FakeEngine> {
  const e = await startFakeEngine(fakeEngineOptions({ model: 'auto', ...overrides }));
  engines.push(e);
  return e;
}
const url = (e: FakeEngine) => `http://127.0.0.1:${e.port}`;

function deployment(desired: number, settings: AutoscaleSettings = { min: 0, max: 2, idleToZeroSeconds: 60 }): DeploymentEntry {
  return {
    name: 'auto',
    servedName: 'auto',
    model: 'auto',
    phase: desired === 0 ? 'Idle' : 'Ready',
    desired,
    autoscale: autoscalePolicy(settings),
  };
}

async function router(source: StaticRouteSource, options: Partial<RouterOptions> = {}): Promise<{ router: Router; base: string }> {
  const r = await startRouter({ source, port: 0, routesIntervalMs: 50, scrapeIntervalMs: 100, log: () => undefined, ...options });
  routers.push(r);
  return { router: r, base: `http://127.0.0.1:${r.port}` };
}

function ask(base: string, key?: string, maxTokens = 4): Promise<Response> {
  return fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model: 'auto', max_tokens: maxTokens, messages: [{ role: 'user', content: 'hello' }] }),
  });
}

async function until(check: () => boolean | Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('requests held at zero', () => {
  it('holds requests for an autoscaled deployment at zero, keeps it listed, and serves them once a replica is routable', async () => {
    const source = new StaticRouteSource([]);
    source.setDeployments([deployment(0)]);
    const held: string[] = [];
    const { router: r, base } = await router(source, { onHold: (model) => held.push(model) });
    const models = (await (await fetch(`${base}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toEqual(['auto']);
    expect((await fetch(`${base}/v1/models/auto`)).status).toBe(200);

    const answers = Array.from({ length: 5 }, () => ask(base));
    await until(() => r.health().queued.auto === 5);
    // One wake a second at most from a router process, however many requests wait.
    expect(held).toEqual(['auto']);

    const e = await engine();
    source.set([{ servedName: 'auto', endpoint: url(e) }]);
    source.setDeployments([deployment(1)]);
    await r.refreshRoutes();
    for (const res of await Promise.all(answers)) {
      expect(res.status).toBe(200);
      expect(Number(res.headers.get('x-llmgw-queued-ms'))).toBeGreaterThan(0);
      await res.arrayBuffer();
    }
    expect(r.health().queued).toEqual({});
  });

  it('answers 429 when the line is full and 503 once a request waited too long, with Retry-After, in OpenAI’s shape', async () => {
    const source = new StaticRouteSource([]);
    source.setDeployments([deployment(0)]);
    const { base } = await router(source, { queue: { maxPerModel: 2, maxWaitMs: 400 } });
    const waiting = [ask(base), ask(base)];
    await new Promise((r) => setTimeout(r, 100));
    const full = await ask(base);
    expect(full.status).toBe(429);
    expect(Number(full.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await full.json()).toMatchObject({ error: { type: 'requests', code: 'queue_full', param: null } });
    for (const res of await Promise.all(waiting)) {
      expect(res.status).toBe(503);
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(await res.json()).toMatchObject({ error: { type: 'service_unavailable_error', code: 'queue_timeout' } });
    }
  });

  it('answers what still waits with 503 router_stopping when the router stops, not a cut connection', async () => {
    const source = new StaticRouteSource([]);
    source.setDeployments([deployment(0)]);
    const { router: r, base } = await router(source);
    const waiting = ask(base);
    await until(() => r.health().queued.auto === 1);
    await r.close(100);
    const res = await waiting;
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ error: { code: 'router_stopping' } });
  });
});

describe('flow control', () => {
  it('with every replica saturated, requests wait at the router and API keys take turns', async () => {
    const e = await engine({ maxConcurrency: 2, tokensPerSecond: 100 });
    const source = new StaticRouteSource([{ servedName: 'auto', endpoint: url(e) }]);
    const keys = new ApiKeys(['key-a-0123456789', 'key-b-0123456789']);
    const { router: r, base } = await router(source, { apiKeys: keys, queue: { saturatedWaiting: 0 } });
    // The engine shows its limit once it has had a line: a burst, then a scrape while it lasts.
    const burst = Array.from({ length: 6 }, () => ask(base, 'key-a-0123456789', 20));
    await new Promise((res) => setTimeout(res, 250));
    await Promise.all((await Promise.all(burst)).map((res) => res.arrayBuffer()));
    await new Promise((res) => setTimeout(res, 250));

    const done: Array<{ key: string; at: number; queuedMs: number }> = [];
    const send = (key: string) =>
      ask(base, key, 10).then(async (res) => {
        expect(res.status).toBe(200);
        await res.arrayBuffer();
        done.push({ key: key.slice(4, 5), at: performance.now(), queuedMs: Number(res.headers.get('x-llmgw-queued-ms') ?? -1) });
      });
    const a = Array.from({ length: 12 }, () => send('key-a-0123456789'));
    await until(() => (r.health().queued.auto ?? 0) >= 8);
    const b = Array.from({ length: 2 }, () => send('key-b-0123456789'));
    await Promise.all([...a, ...b]);
    const order = done.map((d) => d.key).join('');
    // B's two went in turn with A's line, not behind all of it.
    expect(order.lastIndexOf('b')).toBeLessThan(order.length - 4);
    expect(done.filter((d) => d.queuedMs > 0).length).toBeGreaterThanOrEqual(8);
  });
});

describe('a full line', () => {
  it('gives up the heavy tenant’s newest request for a quiet tenant’s, not the quiet one', async () => {
    const e = await engine({ maxConcurrency: 2, tokensPerSecond: 100 });
    const source = new StaticRouteSource([{ servedName: 'auto', endpoint: url(e) }]);
    const keys = new ApiKeys(['key-h-0123456789', 'key-q-0123456789']);
    const { router: r, base } = await router(source, { apiKeys: keys, queue: { saturatedWaiting: 0, maxPerModel: 4 } });
    // The engine shows its limit once it has had a line: a burst, then a scrape while it lasts.
    const burst = Array.from({ length: 6 }, () => ask(base, 'key-h-0123456789', 20));
    await new Promise((res) => setTimeout(res, 250));
    await Promise.all((await Promise.all(burst)).map((res) => res.arrayBuffer()));
    await new Promise((res) => setTimeout(res, 250));

    // 40 tokens at 100/s: the two in flight hold their slots while all eight arrive.
    const statuses = (key: string, n: number) =>
      Array.from({ length: n }, () =>
        ask(base, key, 40).then(async (res) => {
          await res.arrayBuffer();
          return res.status;
        }),
      );
    // Two in flight, four held, two refused: the line is full of one tenant.
    const heavy = statuses('key-h-0123456789', 8);
    await until(() => (r.health().queued.auto ?? 0) >= 4);
    const quiet = statuses('key-q-0123456789', 1);
    expect(await Promise.all(quiet)).toEqual([200]);
    const heavyStatuses = await Promise.all(heavy);
    expect(heavyStatuses.filter((s) => s === 429)).toHaveLength(3);
  });
});

describe('the autoscaler', () => {
  function recording(): DeploymentControl & { decisions: AutoscaleDecision[]; wakes: number } {
    const control = {
      decisions: [] as AutoscaleDecision[],
      wakes: 0,
      decide: (_name: string, decision: AutoscaleDecision) => {
        control.decisions.push(decision);
        return Promise.resolve({ accepted: true as const, desired: decision.desired });
      },
      wake: () => {
        control.wakes++;
        return Promise.resolve({ accepted: true as const, desired: 1 });
      },
    };
    return control;
  }

  it('sends a count only when the load changes it, and one wake for many held requests', async () => {
    const settings = { min: 0, max: 3, target: 2, upAfterSeconds: 1, downAfterSeconds: 2, idleToZeroSeconds: 30 };
    const source = new StaticRouteSource([]);
    source.setDeployments([deployment(0, settings)]);
    const control = recording();
    const held: { router?: Router } = {};
    const autoscaler = new Autoscaler({
      control,
      registry: new Registry(),
      reports: () => (held.router ? [held.router.loadReport()] : []),
      routerId: 'test',
      log: () => undefined,
      intervalMs: 100,
    });
    stops.push(() => autoscaler.stop());
    const started = await router(source, { onHold: (m) => autoscaler.hold(m), onTable: (t) => autoscaler.setTable(t) });
    const r = started.router;
    held.router = r;
    autoscaler.start();
    const first = Array.from({ length: 3 }, () => ask(started.base));
    await until(() => control.wakes > 0);
    await new Promise((res) => setTimeout(res, 500));
    expect(control.wakes).toBe(1);

    // Woken: one slow replica, and six requests at once (three times what one is sized for).
    const e = await engine({ maxConcurrency: 2, tokensPerSecond: 20 });
    source.set([{ servedName: 'auto', endpoint: url(e) }]);
    source.setDeployments([deployment(1, settings)]);
    await r.refreshRoutes();
    await Promise.all((await Promise.all(first)).map((res) => res.arrayBuffer()));
    let load = true;
    const clients = Array.from({ length: 6 }, async () => {
      while (load) await (await ask(started.base, undefined, 10)).arrayBuffer();
    });
    await until(() => control.decisions.length > 0, 10_000);
    expect(control.decisions[0]).toMatchObject({ desired: 3, by: 'test' });
    source.setDeployments([deployment(3, settings)]);
    await r.refreshRoutes();
    // Steady load at the new count: nothing more is sent.
    await new Promise((res) => setTimeout(res, 3000));
    expect(control.decisions).toHaveLength(1);
    load = false;
    await Promise.all(clients);
    // Down once the load has stayed lower for the down window (to the most it asked for meanwhile,
    // which counts the requests that were still finishing).
    await until(() => control.decisions.length > 1, 10_000);
    expect(control.decisions[1]?.desired).toBeLessThan(3);
    expect(control.decisions[1]?.reason).toMatch(/wanted for 2 s/);
  });
});
