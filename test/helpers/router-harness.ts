// The router's test harness: real fake engines and routers over static routes, all closed after
// each test (useRouterHarness), with the request and metric helpers the tests share.
import OpenAI from 'openai';
import { afterEach } from 'vitest';
import { fakeEngineOptions, type FakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { StaticRouteSource, type StaticRoute } from '../../router/routes/table.js';
import { startRouter, type Router, type RouterOptions } from '../../router/http/server.js';

export const engines: FakeEngine[] = [];
/** Routers a test started: closed after it. */
export const routers: Router[] = [];

export function useRouterHarness(): void {
  afterEach(async () => {
    await Promise.all(routers.splice(0).map((r) => r.close(0)));
    await Promise.all(engines.splice(0).map((e) => e.close(0)));
  });
}

export async function engine(overrides: Partial<FakeEngineOptions> = {}): Promise<FakeEngine> {
  const e = await startFakeEngine(fakeEngineOptions({ model: 'demo', ...overrides }));
  engines.push(e);
  return e;
}

export const url = (e: FakeEngine) => `http://127.0.0.1:${e.port}`;

export interface Running {
  router: Router;
  source: StaticRouteSource;
  base: string;
  /** The admin listener: /metrics and the detailed /health. */
  admin: string;
  openai: OpenAI;
  logs: string[];
}

export async function router(routes: StaticRoute[], options: Partial<RouterOptions> = {}): Promise<Running> {
  const source = new StaticRouteSource(routes);
  const logs: string[] = [];
  const r = await startRouter({
    source,
    port: 0,
    routesIntervalMs: 100,
    scrapeIntervalMs: 200,
    admin: { host: '127.0.0.1', port: 0 },
    log: (l) => logs.push(l),
    ...options,
  });
  routers.push(r);
  const base = `http://127.0.0.1:${r.port}`;
  const admin = `http://127.0.0.1:${r.adminPort ?? 0}`;
  return { router: r, source, base, admin, openai: new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 }), logs };
}

/** Which fake engine answered: its ids carry a per-engine random prefix. */
export const engineOf = (id: string) => id.replace(/^[a-z]+-/, '').slice(0, 12);

export async function post(base: string, path: string, body: string, headers: Record<string, string> = {}): Promise<Response> {
  return await fetch(`${base}${path}`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
}

export async function engineMetric(e: FakeEngine, name: string): Promise<number> {
  const text = await (await fetch(`${url(e)}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`));
  return Number(line?.slice(line.lastIndexOf(' ') + 1));
}

/** A metric's sum over its series, read from the router's admin listener (`admin`). */
export async function routerMetric(admin: string, prefix: string): Promise<number> {
  const text = await (await fetch(`${admin}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(prefix))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

export const chat = (content = 'hello there', extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'demo', messages: [{ role: 'user', content }], ...extra });

/** A streamed chat completion for 'demo' through the SDK, asking for up to `maxTokens` tokens. */
export const streamDemo = (openai: OpenAI, maxTokens: number) =>
  openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'go' }], max_tokens: maxTokens, stream: true });
