// The router in front of real fake engines, over real HTTP, with static routes: what an OpenAI
// client sees (every route, streaming that stays incremental, errors in OpenAI's shape), and
// what keeps requests alive (failover, ejection, aborting work for clients that left, balancing,
// session and prefix affinity, serving on while the route source is down), and backpressure.
import { EventEmitter } from 'node:events';
import OpenAI from 'openai';
import type { Pool } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { fakeEngineOptions, type FakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { findFreePort } from '../../common/ports.js';
import { ApiKeys } from '../../router/auth.js';
import { parseAffinity } from '../../router/balancer.js';
import { Endpoint } from '../../router/endpoint.js';
import { RouterMetrics } from '../../router/metrics.js';
import { ModelPool } from '../../router/pools.js';
import { Exchange, type ExchangeResponse } from '../../router/proxy.js';
import { StaticRouteSource, type RouteEntry, type RouteSource, type StaticRoute } from '../../router/routes.js';
import { startRouter, type Router, type RouterOptions } from '../../router/server.js';

const engines: FakeEngine[] = [];
const routers: Router[] = [];
afterEach(async () => {
  await Promise.all(routers.splice(0).map((r) => r.close(0)));
  await Promise.all(engines.splice(0).map((e) => e.close(0)));
});

async function engine(overrides: Partial<FakeEngineOptions> = {}): Promise<FakeEngine> {
  const e = await startFakeEngine(fakeEngineOptions({ model: 'demo', ...overrides }));
  engines.push(e);
  return e;
}

const url = (e: FakeEngine) => `http://127.0.0.1:${e.port}`;

interface Running {
  router: Router;
  source: StaticRouteSource;
  base: string;
  openai: OpenAI;
  logs: string[];
}

async function router(routes: StaticRoute[], options: Partial<RouterOptions> = {}): Promise<Running> {
  const source = new StaticRouteSource(routes);
  const logs: string[] = [];
  const r = await startRouter({ source, port: 0, routesIntervalMs: 100, scrapeIntervalMs: 200, log: (l) => logs.push(l), ...options });
  routers.push(r);
  const base = `http://127.0.0.1:${r.port}`;
  return { router: r, source, base, openai: new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 }), logs };
}

/** Which fake engine answered: its ids carry a per-engine random prefix. */
const engineOf = (id: string) => id.replace(/^[a-z]+-/, '').slice(0, 12);

async function post(base: string, path: string, body: string, headers: Record<string, string> = {}): Promise<Response> {
  return await fetch(`${base}${path}`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
}

async function waitFor(check: () => Promise<boolean> | boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function engineMetric(e: FakeEngine, name: string): Promise<number> {
  const text = await (await fetch(`${url(e)}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`));
  return Number(line?.slice(line.lastIndexOf(' ') + 1));
}

async function routerMetric(base: string, prefix: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(prefix))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

const chat = (content = 'hello there', extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'demo', messages: [{ role: 'user', content }], ...extra });

describe('router: the OpenAI surface through the official client', () => {
  it('answers chat (plain and streamed), completions, embeddings and the model list, like the engine does', async () => {
    const e = await engine();
    const { openai } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    const direct = new OpenAI({ baseURL: `${url(e)}/v1`, apiKey: 'x', maxRetries: 0 });
    const request = { model: 'demo', messages: [{ role: 'user' as const, content: 'tell me a story' }], max_tokens: 7 };

    const viaRouter = await openai.chat.completions.create(request);
    const viaEngine = await direct.chat.completions.create(request);
    expect(viaRouter.choices[0]?.message.content).toBe(viaEngine.choices[0]?.message.content);
    expect(viaRouter.usage).toEqual(viaEngine.usage);

    let streamed = '';
    for await (const chunk of await openai.chat.completions.create({ ...request, stream: true }))
      streamed += chunk.choices[0]?.delta.content ?? '';
    expect(streamed).toBe(viaEngine.choices[0]?.message.content);

    const completion = await openai.completions.create({ model: 'demo', prompt: 'once upon a time', max_tokens: 5 });
    expect(completion.choices[0]?.text.trim().split(' ')).toHaveLength(5);

    const embedding = await openai.embeddings.create({ model: 'demo', input: ['a', 'b'] });
    expect(embedding.data).toHaveLength(2);
    expect(embedding.data[0]?.embedding.length).toBeGreaterThan(0);

    const models = await openai.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['demo']);
  });

  it('serves a model addressed by its deployment name under the name the engine knows', async () => {
    const e = await engine();
    const { openai } = await router([{ servedName: 'demo', deployment: 'demo-canary', endpoint: url(e) }]);
    const reply = await openai.chat.completions.create({ model: 'demo-canary', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
    expect(reply.model).toBe('demo');
  });

  it("tells the client about an unknown model with the SDK's NotFoundError", async () => {
    const e = await engine();
    const { openai } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    await expect(openai.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(
      OpenAI.NotFoundError,
    );
  });

  it("passes the stream through chunk by chunk, at the engine's token rate", async () => {
    const e = await engine({ tokensPerSecond: 20 });
    const { openai } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    const stream = await openai.chat.completions.create({
      model: 'demo',
      messages: [{ role: 'user', content: 'go' }],
      max_tokens: 12,
      stream: true,
    });
    const arrivals: number[] = [];
    for await (const chunk of stream) if (chunk.choices[0]?.delta.content) arrivals.push(performance.now());
    expect(arrivals).toHaveLength(12);
    // 12 tokens at 20/s: the first arrives ~50 ms in, the last ~600 ms in.
    expect((arrivals.at(-1) as number) - (arrivals[0] as number)).toBeGreaterThan(400);
    const gaps = arrivals.slice(1).map((t, i) => t - (arrivals[i] as number));
    const median = [...gaps].sort((a, b) => a - b)[Math.floor(gaps.length / 2)] as number;
    // Not buffered: the gaps keep the engine's 50 ms rhythm (lower bound only, so a slow
    // machine cannot fail it; buffering would collapse the gaps towards zero).
    expect(median).toBeGreaterThan(30);
  });
});

describe("router: refusals in OpenAI's error shape", () => {
  /** OpenAI's shape exactly: four fields, nothing else, and the expected status and code. */
  async function expectError(res: Response, status: number, fields: Record<string, unknown>): Promise<void> {
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toContain('application/json');
    const body = (await res.json()) as { error: Record<string, unknown> };
    expect(Object.keys(body)).toEqual(['error']);
    expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
    expect(typeof body.error.message).toBe('string');
    expect(body.error).toMatchObject(fields);
  }

  it('400 for invalid JSON and for a missing model, 404 for an unknown model or path', async () => {
    const e = await engine();
    const { base } = await router([{ servedName: 'demo', endpoint: url(e) }]);

    await expectError(await post(base, '/v1/chat/completions', '{"model": "demo",'), 400, {
      type: 'invalid_request_error',
      code: 'invalid_json',
      param: null,
    });
    await expectError(await post(base, '/v1/completions', '[1, 2]'), 400, { code: 'invalid_json' });
    await expectError(await post(base, '/v1/chat/completions', JSON.stringify({ messages: [] })), 400, {
      param: 'model',
      code: 'missing_required_parameter',
    });
    await expectError(await post(base, '/v1/embeddings', JSON.stringify({ model: 'other', input: 'x' })), 404, {
      code: 'model_not_found',
      param: 'model',
    });
    await expectError(await fetch(`${base}/v2/whatever`), 404, { code: 'unknown_url' });
    await expectError(await fetch(`${base}/v1/chat/completions`), 405, { code: 'method_not_allowed' });
  });

  it('503 with Retry-After while the model has no Ready replica, and the model is missing from the list', async () => {
    const e = await engine();
    const { base, openai } = await router([{ servedName: 'demo', endpoint: url(e), phase: 'Loading' }]);
    const res = await post(base, '/v1/chat/completions', chat());
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    await expectError(res, 503, { code: 'no_replica_ready' });
    expect((await openai.models.list()).data).toEqual([]);
  });

  it('413 for a body over the limit, whether declared or streamed', async () => {
    const e = await engine();
    const { base } = await router([{ servedName: 'demo', endpoint: url(e) }], { bodyLimitBytes: 2048 });
    const big = chat('x'.repeat(4096));
    await expectError(await post(base, '/v1/chat/completions', big), 413, { code: 'request_too_large' });
    // Without Content-Length (chunked), the limit is enforced while reading.
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(big));
        controller.close();
      },
    });
    const chunked = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body, duplex: 'half' } as RequestInit);
    expect(chunked.status).toBe(413);
    expect((await post(base, '/v1/chat/completions', chat())).status).toBe(200);
  });

  it('401 without a key or with a wrong one when keys are configured; the right key passes', async () => {
    const e = await engine();
    const { base } = await router([{ servedName: 'demo', endpoint: url(e) }], { apiKeys: new ApiKeys(['k-one', 'k-two']) });
    await expectError(await post(base, '/v1/chat/completions', chat()), 401, { code: 'invalid_api_key' });
    await expectError(await post(base, '/v1/chat/completions', chat(), { authorization: 'Bearer k-three' }), 401, {
      code: 'invalid_api_key',
    });
    expect((await fetch(`${base}/v1/models`)).status).toBe(401);
    const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'k-two', maxRetries: 0 });
    expect((await openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'x' }] })).object).toBe(
      'chat.completion',
    );
    await expect(new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 }).models.list()).rejects.toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
  });

  it("passes an engine's own error (vLLM's flat shape) through as OpenAI's, with the engine's status", async () => {
    const e = await engine({ maxModelLen: 50 });
    const { base, openai } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    await expectError(await post(base, '/v1/chat/completions', chat('hi', { max_tokens: 100 })), 400, {
      message: expect.stringContaining('maximum context length'),
      type: 'BadRequestError',
      code: 400,
    });
    await expect(
      openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'x' }], max_tokens: 100 }),
    ).rejects.toBeInstanceOf(OpenAI.BadRequestError);
  });
});

describe('router: failover and faults', () => {
  it('serves every request when one of two endpoints is dead, and ejects the dead one', async () => {
    const live = await engine();
    const dead = `http://127.0.0.1:${await findFreePort()}`;
    const {
      base,
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
    expect(await routerMetric(base, 'llmgw_router_retries_total')).toBeGreaterThan(0);
    expect(await routerMetric(base, `llmgw_router_ejections_total{endpoint="${dead}"}`)).toBeGreaterThanOrEqual(1);
    expect(r.health().ejected).toEqual([dead]);
    // Once ejected, the dead endpoint costs nothing more.
    const retriesBefore = await routerMetric(base, 'llmgw_router_retries_total');
    for (let i = 0; i < 10; i++)
      await openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'again' }], max_tokens: 2 });
    expect(await routerMetric(base, 'llmgw_router_retries_total')).toBe(retriesBefore);
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
    const stream = await openai.chat.completions.create({
      model: 'demo',
      messages: [{ role: 'user', content: 'go' }],
      max_tokens: 200,
      stream: true,
    });
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
    const { base } = await router([{ servedName: 'demo', endpoint: url(e) }]);
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
    await waitFor(async () => (await routerMetric(base, 'llmgw_router_requests_total{model="demo",status="499"}')) === 1, 2000);
  });
});

describe('router: balancing', () => {
  it('spreads concurrent requests over both engines', async () => {
    const a = await engine({ tokensPerSecond: 100 });
    const b = await engine({ tokensPerSecond: 100 });
    const { openai } = await router([
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b) },
    ]);
    const answers = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: `q${i}` }], max_tokens: 10 }),
      ),
    );
    const counts = new Map<string, number>();
    for (const answer of answers) counts.set(engineOf(answer.id), (counts.get(engineOf(answer.id)) ?? 0) + 1);
    expect(counts.size).toBe(2);
    for (const n of counts.values()) expect(n).toBeGreaterThanOrEqual(8);
  });

  it("keeps a session (X-Session-ID, else the body's user) on one engine by default, while sessions spread over both", async () => {
    const a = await engine();
    const b = await engine();
    const { openai } = await router([
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b) },
    ]);
    const ask = async (session: string, how: 'header' | 'user' = 'header') =>
      engineOf(
        (
          await openai.chat.completions.create(
            {
              model: 'demo',
              messages: [{ role: 'user', content: `turn ${Math.random()}` }],
              max_tokens: 2,
              ...(how === 'user' ? { user: session } : {}),
            },
            { headers: how === 'header' ? { 'x-session-id': session } : {} },
          )
        ).id,
      );
    const first = await ask('alice');
    for (let i = 0; i < 10; i++) expect(await ask('alice')).toBe(first);
    const bob = await ask('bob', 'user');
    for (let i = 0; i < 10; i++) expect(await ask('bob', 'user')).toBe(bob);
    const owners = new Set<string>();
    for (let i = 0; i < 20; i++) owners.add(await ask(`session-${i}`));
    expect(owners.size).toBe(2);
  });

  it('keeps sending to a replica whose agent is unreachable (Unknown) while its engine answers', async () => {
    const e = await engine();
    const { base } = await router([{ servedName: 'demo', endpoint: url(e), phase: 'Unknown' }]);
    expect((await post(base, '/v1/chat/completions', chat())).status).toBe(200);
  });

  it('keeps prompts that share their beginning on one engine by default, and spreads them with affinity off', async () => {
    const a = await engine();
    const b = await engine();
    const routes = [
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b) },
    ];
    const { openai } = await router(routes);
    const off = (await router(routes, { affinity: parseAffinity('demo:off') })).openai;
    const ask = async (system: string, question: string, client = openai) =>
      engineOf(
        (
          await client.chat.completions.create({
            model: 'demo',
            messages: [
              { role: 'system', content: system },
              { role: 'user', content: question },
            ],
            max_tokens: 2,
          })
        ).id,
      );
    const system = `You are agent ${'x'.repeat(1200)}`;
    const first = await ask(system, 'first question');
    for (let i = 0; i < 8; i++) expect(await ask(system, `question ${i}`)).toBe(first);
    const owners = new Set<string>();
    for (let i = 0; i < 20; i++) owners.add(await ask(`You are agent number ${i}`, 'hello'));
    expect(owners.size).toBe(2);
    const spread = new Set<string>();
    for (let i = 0; i < 20; i++) spread.add(await ask(system, `question ${i}`, off));
    expect(spread.size).toBe(2);
  });

  it('sends no new request to a replica once it leaves the table (draining)', async () => {
    const a = await engine();
    const b = await engine();
    const {
      openai,
      source,
      router: r,
    } = await router([
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b) },
    ]);
    source.set([
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b), phase: 'Draining' },
    ]);
    await r.refreshRoutes();
    const before = await engineMetric(b, 'vllm:request_success_total');
    for (let i = 0; i < 10; i++)
      await openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: `q${i}` }], max_tokens: 2 });
    expect(await engineMetric(b, 'vllm:request_success_total')).toBe(before);
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
    const r = await startRouter({ source, port: 0, routesIntervalMs: 50, log: (l) => logs.push(l) });
    routers.push(r);
    const base = `http://127.0.0.1:${r.port}`;

    down = true;
    await new Promise((res) => setTimeout(res, 300));
    expect((await post(base, '/v1/chat/completions', chat())).status).toBe(200);
    const health = (await (await fetch(`${base}/health`)).json()) as {
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

describe('router: backpressure', () => {
  /** Just enough of a ServerResponse: a socket that is full until drained. */
  class SlowClient extends EventEmitter {
    full = false;
    written = 0;
    headersSent = false;
    destroyed = false;
    exchange: Exchange | undefined = undefined;
    writeHead(): this {
      return this;
    }
    flushHeaders(): void {
      this.headersSent = true;
    }
    write(chunk: Buffer): boolean {
      this.headersSent = true;
      this.written += chunk.length;
      return !this.full;
    }
    end(): void {}
  }

  it("pauses the engine's response while the client's socket is full, and resumes it on drain", () => {
    const dispatched: unknown[] = [];
    const pool = { dispatch: (_opts: unknown, handler: unknown) => dispatched.push(handler) } as unknown as Pool;
    const metrics = new RouterMetrics(() => []);
    const model = new ModelPool('demo', [new Endpoint('http://engine:1', pool)], 'least-loaded', metrics.forModel('demo'), undefined);
    const client = new SlowClient();
    const exchange = new Exchange(
      { metrics, maxAttempts: 3, lookup: () => model },
      client as unknown as ExchangeResponse,
      model,
      '/v1/chat/completions',
      Buffer.from('{}'),
      -1,
      -1,
      0,
    );
    exchange.start();
    expect(dispatched).toEqual([exchange]);

    // undici's own handler hooks: onData answering false pauses the socket until resume().
    let paused = false;
    const resume = () => (paused = false);
    const deliver = (text: string) => {
      if (!exchange.onData(Buffer.from(text))) paused = true;
    };
    exchange.onConnect(() => undefined);
    exchange.onHeaders(200, [Buffer.from('Content-Type'), Buffer.from('text/event-stream')], resume);
    deliver('data: {"a":1}\n\n');
    expect(paused).toBe(false);
    client.full = true;
    deliver('data: {"a":2}\n\n');
    expect(paused).toBe(true);
    client.full = false;
    client.emit('drain');
    expect(paused).toBe(false);
    expect(client.written).toBe(30);
  });
});
