// What keeps requests alive through the router: failover past a dead endpoint and its ejection,
// retries of a loading engine's 503, errors for streams cut off, aborted work for clients that
// left, and serving on while the route source is down.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { findFreePort } from '../../common/ports.js';
import type { RouteEntry, RouteSource } from '../../router/routes/table.js';
import { startRouter } from '../../router/http/server.js';
import { waitFor } from '../helpers/poll.js';
import { chat, engine, engineMetric, post, router, routerMetric, routers, url, useRouterHarness } from '../helpers/router-harness.js';
import { streamDemo } from '../helpers/router-harness.js';

useRouterHarness();

describe('router: failover and faults', () => {
  it('serves every request when one of two endpoints is dead, and ejects the dead one', async () => {
    const live = await engine();
    const dead = `http://127.0.0.1:${await findFreePort()}`;
    const {
      admin,
      openai,
      router: r,
    } = await router([
      { servedName: 'demo', endpoint: dead },
      { servedName: 'demo', endpoint: url(live) },
    ]);
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: `q${i}` }], max_tokens: 3 }),
      ),
    );
    expect(results.every((c) => c.object === 'chat.completion')).toBe(true);
    expect(await routerMetric(admin, 'llmgw_router_retries_total')).toBeGreaterThan(0);
    expect(await routerMetric(admin, `llmgw_router_ejections_total{endpoint="${dead}"}`)).toBeGreaterThanOrEqual(1);
    expect(r.health().ejected).toEqual([dead]);
    // Once ejected, the dead endpoint costs nothing more.
    const retriesBefore = await routerMetric(admin, 'llmgw_router_retries_total');
    for (let i = 0; i < 10; i++)
      await openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'again' }], max_tokens: 2 });
    expect(await routerMetric(admin, 'llmgw_router_retries_total')).toBe(retriesBefore);
  });

  it('retries a 503 before the first byte on another replica (an engine still loading)', async () => {
    const loading = await engine({ loadTimeS: 60 });
    const ready = await engine();
    const { base } = await router([
      { servedName: 'demo', endpoint: url(loading) },
      { servedName: 'demo', endpoint: url(ready) },
    ]);
    for (let i = 0; i < 6; i++) expect((await post(base, '/v1/chat/completions', chat(`q${i}`))).status).toBe(200);
  });

  it('ends the stream with an OpenAI error event when the engine dies mid-stream; nothing hangs', async () => {
    const e = await engine({ tokensPerSecond: 20 });
    const { openai } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    const stream = await streamDemo(openai, 200);
    let tokens = 0;
    const consume = (async () => {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content) tokens++;
        if (tokens === 3) void e.close(0);
      }
    })();
    const error = await consume.then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).message).toContain('engine stopped');
    expect(tokens).toBeGreaterThanOrEqual(3);
    expect(tokens).toBeLessThan(200);
  });

  it("aborts the engine's work when the client disconnects", async () => {
    const e = await engine({ tokensPerSecond: 50 });
    const { base, admin } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    const abort = new AbortController();
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      body: chat('long one', { max_tokens: 5000, stream: true }),
      headers: { 'content-type': 'application/json' },
      signal: abort.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    await reader.read();
    expect(await engineMetric(e, 'vllm:num_requests_running')).toBe(1);
    abort.abort();
    await waitFor(async () => (await engineMetric(e, 'vllm:num_requests_running')) === 0, 2000);
    await waitFor(async () => (await routerMetric(admin, 'llmgw_router_requests_total{model="demo",status="499"}')) === 1, 2000);
  });
});

describe('router: route source outages', () => {
  it('keeps serving its last table while the source fails, says so in /health and the log once, and catches up', async () => {
    const a = await engine();
    const b = await engine();
    let entries: RouteEntry[] = [{ deployment: 'demo', servedName: 'demo', endpoint: url(a), phase: 'Ready', replicaId: 'replica/demo/1' }];
    let down = false;
    const source: RouteSource = {
      description: 'flaky',
      fetch: () => (down ? Promise.reject(new Error('connection refused')) : Promise.resolve({ routes: entries, deployments: [] })),
      close: () => Promise.resolve(),
    };
    const logs: string[] = [];
    const r = await startRouter({ source, port: 0, routesIntervalMs: 50, admin: { host: '127.0.0.1', port: 0 }, log: (l) => logs.push(l) });
    routers.push(r);
    const base = `http://127.0.0.1:${r.port}`;
    const admin = `http://127.0.0.1:${r.adminPort ?? 0}`;

    down = true;
    await new Promise((res) => setTimeout(res, 300));
    expect((await post(base, '/v1/chat/completions', chat())).status).toBe(200);
    // The public listener says only that it is degraded; the admin listener says why.
    expect(await (await fetch(`${base}/health`)).json()).toEqual({ status: 'degraded' });
    const health = (await (await fetch(`${admin}/health`)).json()) as {
      status: string;
      routes: { state: string; since: string; error: string };
    };
    expect(health.status).toBe('degraded');
    expect(health.routes.state).toBe('unreachable');
    expect(health.routes.error).toContain('connection refused');
    expect(logs.filter((l) => l.includes('unreachable'))).toHaveLength(1);

    entries = [...entries, { deployment: 'demo', servedName: 'demo', endpoint: url(b), phase: 'Ready', replicaId: 'replica/demo/2' }];
    down = false;
    await waitFor(() => r.health().routes.state === 'ok');
    expect(r.health().endpoints).toBe(2);
    expect(logs.filter((l) => l.includes('reachable again'))).toHaveLength(1);
  });
});
