// The router's edges towards clients and engines, over real HTTP with fake engines: no engine
// address in answers unless asked (--debug-headers); /metrics and the detailed /health only on
// the admin listener; a budget for request bodies in memory, refused with 503 and Retry-After;
// an idle timeout towards engines that cuts a silent engine but not a slow healthy stream; and a
// malformed percent-escape answered 400, not 500.
import { existsSync, mkdtempSync, statSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { autoscalePolicy } from '../../common/autoscale.js';
import { adminListener } from '../../router/http/admin-addr.js';
import { runRouter } from '../../router/main.js';
import { StaticRouteSource, type DeploymentEntry } from '../../router/routes/table.js';
import { chat, engine, post, router, url, useRouterHarness } from '../helpers/router-harness.js';

useRouterHarness();

const atZero: DeploymentEntry = {
  name: 'demo',
  servedName: 'demo',
  model: 'demo',
  phase: 'Idle',
  desired: 0,
  autoscale: autoscalePolicy({ min: 0, max: 1, idleToZeroSeconds: 60 }),
};

/** A chat body of exactly `bytes` bytes. */
function bodyOf(bytes: number): string {
  const head = '{"model":"demo","max_tokens":2,"messages":[{"role":"user","content":"';
  const tail = '"}]}';
  return head + 'x'.repeat(bytes - head.length - tail.length) + tail;
}

async function until(check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A stand-in engine that answers every request its own way (a hung or silent engine). */
async function rawEngine(handler: http.RequestListener): Promise<{ url: string; close(): void }> {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

describe('router edges: what clients can learn', () => {
  it('names no engine in any answer by default, and names it with debugHeaders', async () => {
    const e = await engine();
    const plain = await router([{ servedName: 'demo', endpoint: url(e) }]);
    const streamed = await post(plain.base, '/v1/chat/completions', chat('hi', { stream: true }));
    const json = await post(plain.base, '/v1/chat/completions', chat());
    for (const res of [streamed, json]) {
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      expect(res.headers.get('x-llmgw-endpoint')).toBeNull();
      expect([...res.headers.values()].join(' ')).not.toContain(`:${e.port}`);
    }
    const debug = await router([{ servedName: 'demo', endpoint: url(e) }], { debugHeaders: true });
    const res = await post(debug.base, '/v1/chat/completions', chat());
    await res.arrayBuffer();
    expect(res.headers.get('x-llmgw-endpoint')).toBe(url(e));
  });

  it('serves /metrics and the detailed /health on the admin listener only; the public /health says ok or degraded', async () => {
    const e = await engine();
    const { base, admin } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    expect((await fetch(`${base}/metrics`)).status).toBe(404);
    expect(await (await fetch(`${base}/health`)).json()).toEqual({ status: 'ok' });
    const metrics = await fetch(`${admin}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('llmgw_router_held_bytes');
    const health = (await (await fetch(`${admin}/health`)).json()) as { status: string; endpoints: number };
    expect(health).toMatchObject({ status: 'ok', endpoints: 1 });
    // Off: no admin listener at all.
    const off = await router([{ servedName: 'demo', endpoint: url(e) }], { admin: undefined });
    expect(off.router.adminPort).toBeUndefined();
  });

  it('puts the admin listener on a 0600 Unix socket unless told a port, never on a port nobody named', async () => {
    const runDir = mkdtempSync(join(tmpdir(), 'llmgw-run-'));
    const env = { XDG_RUNTIME_DIR: runDir };
    const socket = { path: join(runDir, 'llmgw', 'router-8080.sock') };
    expect(adminListener(undefined, 8080, env)).toEqual(socket);
    expect(adminListener('unix', 8080, env)).toEqual(socket);
    expect(adminListener('unix:/run/a.sock', 8080, env)).toEqual({ path: '/run/a.sock' });
    expect(adminListener('off', 8080)).toBeUndefined();
    expect(adminListener('[::1]:9100', 8080)).toEqual({ host: '::1', port: 9100 });
    await expect(runRouter({ port: 0, host: '127.0.0.1', staticRoutes: 'demo=http://127.0.0.1:9', adminAddr: 'nowhere' })).rejects.toThrow(
      /--admin-addr: must be unix, unix:PATH, HOST:PORT or off/,
    );

    const e = await engine();
    const running = await runRouter({ port: 0, host: '127.0.0.1', staticRoutes: `demo=${url(e)}`, autoscale: 'off' }, env);
    const path = join(runDir, 'llmgw', `router-pid-${process.pid}.sock`);
    try {
      expect(statSync(path).mode & 0o777).toBe(0o600);
      expect(statSync(dirname(path)).mode & 0o777).toBe(0o700);
      const metrics = await new Promise<{ status: number; text: string }>((resolve, reject) => {
        http
          .get({ socketPath: path, path: '/metrics' }, (res) => {
            let text = '';
            res.on('data', (chunk: Buffer) => (text += chunk.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
          })
          .on('error', reject);
      });
      expect(metrics.status).toBe(200);
      expect(metrics.text).toContain('llmgw_router_held_bytes');
    } finally {
      await running.close();
    }
    // A router that stopped leaves no socket behind to refuse the next one.
    expect(existsSync(path)).toBe(false);
  });

  it('answers a malformed percent-escape in the path with 400 in OpenAI’s shape', async () => {
    const { base } = await router([]);
    const res = await fetch(`${base}/v1/models/%E0%A4%A`);
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { type: string; code: string; message: string } };
    expect(body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_url' });
  });
});

describe('router edges: memory and time', () => {
  it('holds request bodies up to its byte budget and answers 503 with Retry-After beyond it', async () => {
    const source = new StaticRouteSource([]);
    source.setDeployments([atZero]);
    const size = 20_000;
    const { router: r, base } = await router([], { source, heldBytes: 3 * size + 100 });
    const held = [0, 1, 2].map(() => post(base, '/v1/chat/completions', bodyOf(size)));
    await until(() => r.health().queued.demo === 3);
    expect(r.health().heldBytes).toEqual({ used: 3 * size, limit: 3 * size + 100 });

    const over = await post(base, '/v1/chat/completions', bodyOf(size));
    expect(over.status).toBe(503);
    expect(over.headers.get('retry-after')).toBe('2');
    expect(((await over.json()) as { error: { code: string } }).error.code).toBe('router_busy');
    // A body without a Content-Length is counted as it arrives, and refused all the same.
    const chunked = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: new Blob([bodyOf(size)]).stream(),
      duplex: 'half',
    } as RequestInit);
    expect(chunked.status).toBe(503);
    await chunked.arrayBuffer();

    // A replica: the held requests are served, and their bytes go back to the budget.
    const e = await engine();
    source.set([{ servedName: 'demo', endpoint: url(e) }]);
    source.setDeployments([{ ...atZero, phase: 'Ready', desired: 1 }]);
    await r.refreshRoutes();
    for (const res of await Promise.all(held)) {
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    await until(() => r.health().heldBytes.used === 0);
  });

  it('refuses a body over the budget before the client sends it when it asks Expect: 100-continue', async () => {
    const { router: r, base } = await router([{ servedName: 'demo', endpoint: 'http://127.0.0.1:9' }], { heldBytes: 10_000 });
    const answer = await new Promise<{ status: number; continued: boolean }>((resolve, reject) => {
      let continued = false;
      const req = http.request(`${base}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': 20_000, expect: '100-continue' },
      });
      req.on('continue', () => {
        continued = true;
        req.end(bodyOf(20_000));
      });
      req.on('response', (res) => {
        res.resume();
        resolve({ status: res.statusCode ?? 0, continued });
        req.destroy();
      });
      req.on('error', reject);
      req.flushHeaders();
    });
    expect(answer).toEqual({ status: 503, continued: false });
    expect(r.health().heldBytes.used).toBe(0);
  });

  it('fails a request whose engine falls silent past the idle timeout, and lets a slow healthy stream finish', async () => {
    const silent = await rawEngine((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n');
    });
    const hung = await rawEngine(() => undefined);
    const slow = await engine({ tokensPerSecond: 10 });
    try {
      const options = { upstreamIdleTimeoutMs: 400, maxAttempts: 1 };
      const stalled = await router([{ servedName: 'demo', endpoint: silent.url }], options);
      const cut = await post(stalled.base, '/v1/chat/completions', chat('hi', { stream: true }));
      expect(await cut.text()).toMatch(/stopped in the middle of the stream[\s\S]*\[DONE\]/);

      const noHeaders = await router([{ servedName: 'demo', endpoint: hung.url }], options);
      const started = Date.now();
      expect((await post(noHeaders.base, '/v1/chat/completions', chat())).status).toBe(503);
      expect(Date.now() - started).toBeLessThan(5000);

      // 8 tokens at 10 a second: twice the idle timeout in all, never silent for long.
      const healthy = await router([{ servedName: 'demo', endpoint: url(slow) }], options);
      const res = await post(healthy.base, '/v1/chat/completions', chat('hi', { stream: true, max_tokens: 8 }));
      const text = await res.text();
      expect(text).not.toContain('stopped in the middle');
      expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    } finally {
      silent.close();
      hung.close();
    }
  });

  it('limits each API key to 64 requests in flight by default when keys are configured', async () => {
    const e = await engine({ tokensPerSecond: 20 });
    const running = await runRouter(
      { port: 0, host: '127.0.0.1', staticRoutes: `demo=${url(e)}`, autoscale: 'off', adminAddr: 'off' },
      { LLMGW_API_KEYS: 'k-one' },
    );
    try {
      const base = `http://127.0.0.1:${running.port}`;
      const headers = { authorization: 'Bearer k-one' };
      // Long enough (5 s each) to stay in flight while the 65th is sent on a loaded machine.
      const slow = Array.from({ length: 64 }, () => post(base, '/v1/chat/completions', chat('hi', { max_tokens: 100 }), headers));
      const inFlight = async (): Promise<number> => {
        const text = await (await fetch(`${url(e)}/metrics`)).text();
        return Number(/^vllm:num_requests_running\S* (\d+)/m.exec(text)?.[1] ?? 0);
      };
      for (let i = 0; i < 100 && (await inFlight()) < 64; i++) await new Promise((r) => setTimeout(r, 50));
      const refused = await post(base, '/v1/chat/completions', chat(), headers);
      expect(refused.status).toBe(429);
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(((await refused.json()) as { error: { message: string } }).error.message).toContain('limit 64');
      for (const res of await Promise.all(slow)) expect(res.status).toBe(200);
    } finally {
      await running.close();
    }
  });
});
