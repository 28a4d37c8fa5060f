// A model whose replicas sleep, at a real router over a real fake engine, routes given by hand
// (docs/sleep.md, "The router"): its requests are held, not refused; one wakeReplica Update is
// asked for many of them; they go as soon as the route turns Ready; a failed wake answers them as
// a hold past its bound is answered; a key scoped elsewhere wakes nothing; a Ready replica beside
// a sleeping one serves with no wake; which sleeper is woken, by replica id and revision; one
// Update per replica however many ask, a cluster's workers through their primary included.
import { afterEach, describe, expect, it } from 'vitest';
import type { WakeRequest, WakeResult } from '../../common/sleep-types.js';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { ApiKeys, parseKeyEntry } from '../../router/http/auth.js';
import { buildModelRoutes, StaticRouteSource, type RouteEntry, type StaticRoute } from '../../router/routes/table.js';
import { startRouter, type Router, type RouterOptions } from '../../router/http/server.js';
import { answerWake, isWakeAsk, oneWakePerReplica, wakeThroughPrimary } from '../../router/autoscale/wakes.js';
import { VerifiedRouteSource } from '../../router/routes/verify.js';
import { signRoute } from '../../common/route-signature.js';
import { publicKeyFileOf } from '../../common/catalog-key.js';
import { workerKey } from '../helpers/signers.js';

const engines: FakeEngine[] = [];
const routers: Router[] = [];
afterEach(async () => {
  await Promise.all(routers.splice(0).map((r) => r.close(0)));
  await Promise.all(engines.splice(0).map((e) => e.close(0)));
});

async function engine(): Promise<string> {
  const e = await startFakeEngine(fakeEngineOptions({ model: 'sleepy' }));
  engines.push(e);
  return `http://127.0.0.1:${e.port}`;
}

/** The wakeReplica Update as the router calls it: counted, answered when the test says. */
class Wakes {
  readonly calls: Array<{ replicaId: string; request: WakeRequest }> = [];
  private answer: ((r: WakeResult) => void) | undefined;
  private fail: ((e: Error) => void) | undefined;
  readonly call = (replicaId: string, request: WakeRequest): Promise<WakeResult> => {
    this.calls.push({ replicaId, request });
    return new Promise((resolve, reject) => {
      this.answer = resolve;
      this.fail = reject;
    });
  };
  woke(replicaId: string): void {
    this.answer?.({ replicaId, wokeInMs: 800, alreadyAwake: false });
  }
  failed(message: string): void {
    this.fail?.(new Error(message));
  }
}

async function router(source: StaticRouteSource, options: Partial<RouterOptions> = {}): Promise<{ router: Router; base: string }> {
  const r = await startRouter({
    source,
    port: 0,
    routesIntervalMs: 50,
    scrapeIntervalMs: 100,
    routerId: 'test-router',
    log: () => undefined,
    ...options,
  });
  routers.push(r);
  return { router: r, base: `http://127.0.0.1:${r.port}` };
}

function ask(base: string, key?: string): Promise<Response> {
  return fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model: 'sleepy', max_tokens: 4, messages: [{ role: 'user', content: 'hello' }] }),
  });
}

async function until(check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

const sleeping = (endpoint: string): StaticRoute => ({ servedName: 'sleepy', endpoint, phase: 'Sleeping' });

describe('a model whose replicas sleep', () => {
  it('holds its requests, asks one wake for five, and answers all five once the route turns Ready', async () => {
    const endpoint = await engine();
    const source = new StaticRouteSource([sleeping(endpoint)]);
    const wakes = new Wakes();
    const { router: r, base } = await router(source, { wakeReplica: wakes.call });
    // Listed while it sleeps: a client asks for it, and is not told it does not exist.
    const models = (await (await fetch(`${base}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toEqual(['sleepy']);

    const statuses: number[] = [];
    const answers = Array.from({ length: 5 }, () => ask(base).then((res) => (statuses.push(res.status), res)));
    await until(() => r.health().queued.sleepy === 5);
    // The line says so again while it waits (and a table re-read drains it): still one wake.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(statuses).toEqual([]);
    expect(wakes.calls).toEqual([{ replicaId: 'static/sleepy/0', request: expect.objectContaining({ by: 'router:test-router' }) }]);

    source.set([{ servedName: 'sleepy', endpoint }]);
    const all = await Promise.all(answers);
    expect(all.map((res) => res.status)).toEqual([200, 200, 200, 200, 200]);
    wakes.woke('static/sleepy/0');
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(wakes.calls).toHaveLength(1);

    const text = await r.registry.metrics();
    expect(text).toMatch(/llmgw_router_wake_held_total\{model="sleepy"\} 5/);
    expect(text).toMatch(/llmgw_router_wakes_total\{deployment="sleepy",result="woken"\} 1/);
    expect(text).toMatch(/llmgw_router_wake_held_seconds_count\{model="sleepy",outcome="sent"\} 5/);
  });

  it('answers what waits as a hold past its bound when the wake fails: 503, no wait to the end', async () => {
    const source = new StaticRouteSource([sleeping(await engine())]);
    const wakes = new Wakes();
    const { router: r, base } = await router(source, { wakeReplica: wakes.call });
    const answers = [ask(base), ask(base)];
    await until(() => r.health().queued.sleepy === 2);
    wakes.failed('Temporal is unreachable');
    for (const res of await Promise.all(answers)) {
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('queue_timeout');
      expect(body.error.message).toMatch(/^The request waited \d+ s for a replica of model `sleepy` and was not sent: /);
    }
    expect(await r.registry.metrics()).toMatch(/llmgw_router_wakes_total\{deployment="sleepy",result="failed"\} 1/);
  });

  it('refuses a key scoped to another model before anything is held or woken', async () => {
    const source = new StaticRouteSource([sleeping(await engine())]);
    const wakes = new Wakes();
    const apiKeys = new ApiKeys([parseKeyEntry('{"key": "sk-other-model-0123", "models": ["other"]}')]);
    const { router: r, base } = await router(source, { wakeReplica: wakes.call, apiKeys });
    const res = await ask(base, 'sk-other-model-0123');
    expect(res.status).toBe(404);
    expect(wakes.calls).toEqual([]);
    expect(r.health().queued.sleepy ?? 0).toBe(0);
  });

  it('serves from a Ready replica beside a sleeping one, with no wake', async () => {
    const source = new StaticRouteSource([sleeping(await engine()), { servedName: 'sleepy', endpoint: await engine() }]);
    const wakes = new Wakes();
    const { base } = await router(source, { wakeReplica: wakes.call });
    const all = await Promise.all(Array.from({ length: 3 }, () => ask(base)));
    expect(all.map((res) => res.status)).toEqual([200, 200, 200]);
    expect(wakes.calls).toEqual([]);
  });

  it('is refused at once by a router that cannot wake (no Temporal), as a model with no replica is', async () => {
    const source = new StaticRouteSource([sleeping(await engine())]);
    const { base } = await router(source);
    const res = await ask(base);
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('no_replica_ready');
  });
});

describe('which sleeper is woken', () => {
  const entry = (seq: number, phase: RouteEntry['phase'], revision: string): RouteEntry => ({
    replicaId: `replica/sleepy/${seq}`,
    deployment: 'sleepy',
    servedName: 'sleepy',
    endpoint: `http://127.0.0.1:${9000 + seq}`,
    phase,
    revision,
  });

  it('the first by replica id, of the serving revision (the newest replica’s): a rollout’s old sleepers stay asleep', () => {
    const same = buildModelRoutes([entry(4, 'Sleeping', 'r1'), entry(2, 'Sleeping', 'r1'), entry(3, 'Sleeping', 'r1')]).get('sleepy');
    expect(same?.sleepers.map((s) => s.replicaId)).toEqual(['replica/sleepy/2', 'replica/sleepy/3', 'replica/sleepy/4']);
    expect(same?.endpoints).toEqual([]);
    const rollout = buildModelRoutes([entry(1, 'Sleeping', 'r1'), entry(2, 'Sleeping', 'r1'), entry(3, 'Starting', 'r2')]).get('sleepy');
    expect(rollout?.sleepers).toEqual([]);
  });
});

describe('the wakes a router sends', () => {
  it('one Update per replica at a time, whoever asks (the workers of a cluster ask their primary)', async () => {
    let calls = 0;
    let answer: (r: WakeResult) => void = () => undefined;
    const wake = oneWakePerReplica(() => {
      calls++;
      return new Promise<WakeResult>((resolve) => (answer = resolve));
    });
    const asks = [1, 2, 3].map(() => wake('replica/sleepy/2', { by: 'router:a' }));
    answer({ replicaId: 'replica/sleepy/2', wokeInMs: 700, alreadyAwake: false });
    expect((await Promise.all(asks)).map((r) => r.wokeInMs)).toEqual([700, 700, 700]);
    expect(calls).toBe(1);
  });

  it('a cluster: workers ask the primary, which sends one Update for all of them and hands each the answer', async () => {
    const asked: string[] = [];
    let answer: (r: WakeResult) => void = () => undefined;
    const primary = oneWakePerReplica((replicaId, request) => {
      asked.push(`${replicaId} ${request.by}`);
      return new Promise<WakeResult>((resolve) => (answer = resolve));
    });
    // Each worker's channel to the primary, and the primary's handle on that worker, wired in memory.
    const workers = [0, 1, 2].map(() => {
      const listeners: Array<(m: unknown) => void> = [];
      const handle = { isConnected: () => true, send: (m: unknown) => (listeners.forEach((l) => l(m)), true) };
      const channel = {
        connected: true,
        on: (_event: 'message', l: (m: unknown) => void) => listeners.push(l),
        send: (m: unknown) => (isWakeAsk(m) && answerWake(handle, m, primary), true),
      };
      return wakeThroughPrimary(channel);
    });
    const asks = workers.map((wake) => wake('replica/sleepy/1', { by: 'router:primary' }));
    answer({ replicaId: 'replica/sleepy/1', wokeInMs: 650, alreadyAwake: false });
    expect((await Promise.all(asks)).map((r) => r.wokeInMs)).toEqual([650, 650, 650]);
    expect(asked).toEqual(['replica/sleepy/1 router:primary']);
    // A primary with no Temporal client says so, and one that does not answer is given up on:
    // either way the worker answers what waits as a failed wake.
    const listeners: Array<(m: unknown) => void> = [];
    const handle = { isConnected: () => true, send: (m: unknown) => (listeners.forEach((l) => l(m)), true) };
    const noClient = wakeThroughPrimary({
      connected: true,
      on: (_event, l) => listeners.push(l),
      send: (m) => (isWakeAsk(m) && answerWake(handle, m, undefined), true),
    });
    await expect(noClient('replica/sleepy/1', { by: 'router:x' })).rejects.toThrow(/no Temporal client/);
    const silent = wakeThroughPrimary({ connected: true, on: () => undefined, send: () => true }, 50);
    await expect(silent('replica/sleepy/1', { by: 'router:x' })).rejects.toThrow(/did not answer/);
  });

  it('only for a sleeping route the control worker signed: a forged one would have routers send wakes', async () => {
    const { file, keys: worker } = workerKey();
    const genuine: RouteEntry = {
      replicaId: 'replica/sleepy/1',
      deployment: 'sleepy',
      servedName: 'sleepy',
      endpoint: 'http://198.18.0.7:30001',
      phase: 'Sleeping',
      revision: 'r1',
    };
    // The phase is not signed: the signature made while it was Ready stays good while it sleeps.
    const signed = { ...genuine, signature: signRoute(genuine, worker) };
    const inner = {
      description: 'test',
      fetch: () => Promise.resolve({ routes: [signed, { ...genuine, replicaId: 'replica/sleepy/2' }], deployments: [] }),
      close: () => Promise.resolve(),
    };
    const table = await new VerifiedRouteSource(inner, publicKeyFileOf(file), () => undefined).fetch();
    expect(table.routes.map((r) => r.replicaId)).toEqual(['replica/sleepy/1']);
  });
});
