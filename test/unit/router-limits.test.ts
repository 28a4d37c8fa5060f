// Per-key limits and accounting on a real router in front of a real fake engine: a key over its
// requests per second or its concurrent requests gets OpenAI's 429 (the SDK's RateLimitError)
// with Retry-After, other keys are not affected, and /metrics counts requests and tokens per key
// under a prefix of the key's digest, never the key. Also the keys file's limit syntax.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { ApiKeys, loadApiKeys, parseKeyLine } from '../../router/http/auth.js';
import { readUsage } from '../../router/engines/usage.js';
import { isLoopback } from '../../router/main.js';
import { StaticRouteSource } from '../../router/routes/table.js';
import { startRouter, type Router } from '../../router/http/server.js';

const engines: FakeEngine[] = [];
const routers: Router[] = [];
afterEach(async () => {
  await Promise.all(routers.splice(0).map((r) => r.close(0)));
  await Promise.all(engines.splice(0).map((e) => e.close(0)));
});

/** A router with these keys before one fake engine; its public URL (the admin one is `admin`). */
let admin = '';

async function routerWithKeys(keys: ApiKeys, tokensPerSecond = 0): Promise<string> {
  const e = await startFakeEngine(fakeEngineOptions({ model: 'demo', tokensPerSecond }));
  engines.push(e);
  const r = await startRouter({
    source: new StaticRouteSource([{ servedName: 'demo', endpoint: `http://127.0.0.1:${e.port}` }]),
    port: 0,
    apiKeys: keys,
    admin: { host: '127.0.0.1', port: 0 },
    log: () => undefined,
  });
  routers.push(r);
  admin = `http://127.0.0.1:${r.adminPort ?? 0}`;
  return `http://127.0.0.1:${r.port}`;
}

const post = (base: string, key: string, body: Record<string, unknown> = {}) =>
  fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'one two three' }], max_tokens: 4, ...body }),
  });

describe('router: per-key limits', () => {
  it("answers 429 in OpenAI's shape with Retry-After once a key is over its requests per second; other keys pass", async () => {
    const base = await routerWithKeys(new ApiKeys([{ key: 'k-slow', limits: { rps: 2 } }, 'k-free']));
    const statuses: number[] = [];
    let refused: Response | undefined;
    for (let i = 0; i < 6; i++) {
      const res = await post(base, 'k-slow');
      statuses.push(res.status);
      if (res.status === 429) refused ??= res;
      else await res.arrayBuffer();
    }
    // A burst of one second's worth (2) passes; the rest, sent at once, do not.
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(2);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(3);
    expect(refused?.headers.get('retry-after')).toBe('1');
    const body = (await refused?.json()) as { error: Record<string, unknown> };
    expect(body).toEqual({
      error: {
        message: expect.stringContaining('requests per second') as unknown,
        type: 'requests',
        param: null,
        code: 'rate_limit_exceeded',
      },
    });
    expect((await post(base, 'k-free')).status).toBe(200);
    const sdk = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'k-slow', maxRetries: 0 });
    await expect(sdk.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(
      OpenAI.RateLimitError,
    );
    // Refilled after a second: the key works again.
    await new Promise((r) => setTimeout(r, 1100));
    expect((await post(base, 'k-slow')).status).toBe(200);
  });

  it('answers 429 while a key has its concurrent requests in flight, and admits again once one finishes', async () => {
    const base = await routerWithKeys(new ApiKeys([{ key: 'k-two', limits: { concurrent: 2 } }]), 20);
    const slowStream = { max_tokens: 10, stream: true };
    const slow = [post(base, 'k-two', slowStream), post(base, 'k-two', slowStream)];
    // Two streams of half a second each: in flight from their headers until their last event.
    const first = await Promise.all(slow);
    expect(first.map((r) => r.status)).toEqual([200, 200]);
    const third = await post(base, 'k-two');
    expect(third.status).toBe(429);
    expect(third.headers.get('retry-after')).toBe('1');
    expect(((await third.json()) as { error: { message: string } }).error.message).toContain('concurrent');
    await Promise.all(first.map((r) => r.arrayBuffer()));
    expect((await post(base, 'k-two')).status).toBe(200);
  });

  it('counts requests, refusals and engine-reported tokens per key under its digest prefix, never the key', async () => {
    const keys = new ApiKeys([{ key: 'sk-secret-alpha', limits: { rps: 1 } }]);
    const base = await routerWithKeys(keys);
    await (await post(base, 'sk-secret-alpha', { max_tokens: 5 })).arrayBuffer();
    await (await post(base, 'sk-secret-alpha')).arrayBuffer();
    await new Promise((r) => setTimeout(r, 1100));
    const stream = await post(base, 'sk-secret-alpha', { max_tokens: 3, stream: true, stream_options: { include_usage: true } });
    await stream.text();
    expect((await fetch(`${base}/metrics`)).status).toBe(404);
    const text = await (await fetch(`${admin}/metrics`)).text();
    const label = keys.keys[0]?.label as string;
    expect(label).toMatch(/^sha256:[0-9a-f]{12}$/);
    expect(text).not.toContain('sk-secret-alpha');
    expect(text).toContain(`llmgw_router_key_requests_total{key="${label}"} 2`);
    expect(text).toContain(`llmgw_router_key_rate_limited_total{key="${label}",limit="rps"} 1`);
    expect(text).toContain(`llmgw_router_key_tokens_total{key="${label}",kind="completion"} 8`);
    // "one two three" is three words: three prompt tokens per request on the fake engine.
    expect(text).toContain(`llmgw_router_key_tokens_total{key="${label}",kind="prompt"} 6`);
  });
});

describe('router: keys and binding', () => {
  it('reads limits from a keys file line and names a bad one by line, without the key', () => {
    expect(parseKeyLine('sk-a rps=2.5 concurrent=3')).toEqual({ key: 'sk-a', limits: { rps: 2.5, concurrent: 3 } });
    expect(parseKeyLine('sk-b')).toEqual({ key: 'sk-b', limits: {} });
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-keys-'));
    const file = join(dir, 'keys');
    writeFileSync(file, '# team keys\nsk-a rps=2\n\nsk-secret-b concurrent=zero\n');
    expect(() => loadApiKeys({ file, env: {} })).toThrow(/keys:4: concurrent must be an integer/);
    expect(() => loadApiKeys({ file, env: {} })).not.toThrow(/sk-secret-b/);
    writeFileSync(file, 'sk-a rps=2\n');
    const keys = loadApiKeys({ file, env: { LLMGW_API_KEYS: 'sk-c' }, defaults: { rps: undefined, concurrent: 4 } });
    expect(keys?.keys.map((k) => k.limits)).toEqual([
      { rps: 2, concurrent: 4 },
      { rps: undefined, concurrent: 4 },
    ]);
  });

  it('treats only loopback addresses as loopback', () => {
    for (const host of ['127.0.0.1', '127.1.2.3', 'localhost', '::1']) expect(isLoopback(host)).toBe(true);
    for (const host of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.1', 'example.internal']) expect(isLoopback(host)).toBe(false);
  });

  it("reads the usage of a JSON answer and of a stream's last event", () => {
    expect(readUsage(Buffer.from('{"id":"x","usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3}}'))).toEqual({
      prompt: 12,
      completion: 3,
    });
    expect(readUsage(Buffer.from('data: {"choices":[],"usage": {"prompt_tokens": 4, "completion_tokens": 9}}\n\n'))).toEqual({
      prompt: 4,
      completion: 9,
    });
    expect(readUsage(Buffer.from('data: {"choices":[{"delta":{"content":"hi"}}],"usage":null}\n\n'))).toBeUndefined();
  });
});
