// LoRA adapters end to end: real fake engines with vLLM's runtime LoRA API behind a real router,
// driven with the official openai client. Loads on demand, slots never overfilled, hot adapters
// spread, catalog edits followed, engine restarts followed within a second, and engines that
// require a key (--engine-key-file) serve adapters too.
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { AdapterSpec } from '../../router/adapters/catalog.js';
import { engine, engines, router, routerMetric, url, useRouterHarness } from '../helpers/router-harness.js';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { adapterCatalog } from '../../catalog/adapters.js';
import { createCatalogSource } from '../../catalog/watch.js';

useRouterHarness();
const dir = mkdtempSync(join(tmpdir(), 'llmgw-adapters-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function adapters(n: number, prefix = 'ft'): AdapterSpec[] {
  return Array.from({ length: n }, (_, i) => {
    const path = join(dir, `${prefix}-${i}`);
    mkdirSync(path, { recursive: true });
    writeFileSync(join(path, 'adapter_config.json'), JSON.stringify({ r: 8 }));
    return { name: `${prefix}-${i}`, source: path };
  });
}

const lora = { maxLoras: 3, maxLoraRank: 16, loadTimeS: 0.2 };
const ask = (openai: import('openai').OpenAI, model: string) =>
  openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });

async function loadedOn(e: FakeEngine, key?: string): Promise<string[]> {
  const headers: Record<string, string> = key === undefined ? {} : { authorization: `Bearer ${key}` };
  const body = (await (await fetch(`${url(e)}/v1/models`, { headers })).json()) as { data: Array<{ id: string; parent: string | null }> };
  return body.data.filter((m) => m.parent !== null).map((m) => m.id);
}

describe('LoRA adapters through the router', () => {
  it('serves 10 adapters on 2 replicas of 3 slots, never more than 3 loaded, /v1/models lists them with parent', async () => {
    const specs = adapters(10);
    const [a, b] = [await engine({ lora }), await engine({ lora })];
    const { openai, admin } = await router(
      [
        { servedName: 'demo', endpoint: url(a) },
        { servedName: 'demo', endpoint: url(b) },
      ],
      {
        adapters: () => new Map([['demo', specs]]),
      },
    );
    let most = 0;
    const watch = setInterval(
      () => void Promise.all([loadedOn(a), loadedOn(b)]).then((l) => (most = Math.max(most, ...l.map((x) => x.length)))),
      20,
    );
    try {
      for (let round = 0; round < 2; round++) {
        const answers = await Promise.all(specs.map((s) => ask(openai, s.name)));
        expect(answers.map((r) => r.model)).toEqual(specs.map((s) => s.name));
      }
    } finally {
      clearInterval(watch);
    }
    expect(most).toBeLessThanOrEqual(3);
    expect((await loadedOn(a)).length + (await loadedOn(b)).length).toBeLessThanOrEqual(6);
    const models = await openai.models.list();
    const listed = models.data.filter((m) => (m as unknown as { parent?: string }).parent === 'demo').map((m) => m.id);
    expect(listed.sort()).toEqual(specs.map((s) => s.name).sort());
    expect(await openai.models.retrieve('ft-3')).toMatchObject({ id: 'ft-3', parent: 'demo' });
    expect(await routerMetric(admin, 'llmgw_router_adapter_loads_total{result="ok"}')).toBeGreaterThanOrEqual(10);
    expect(await routerMetric(admin, 'llmgw_router_adapter_unloads_total')).toBeGreaterThan(0);
  });

  it('loads a hot adapter on both replicas and a cold one on one; loaded adapters never wait for a load', async () => {
    const specs = adapters(4, 'hc');
    const [a, b] = [await engine({ lora: { ...lora, loadTimeS: 0.5 } }), await engine({ lora: { ...lora, loadTimeS: 0.5 } })];
    const { openai } = await router(
      [
        { servedName: 'demo', endpoint: url(a) },
        { servedName: 'demo', endpoint: url(b) },
      ],
      {
        adapters: () => new Map([['demo', specs]]),
      },
    );
    // Half the traffic for hc-0, the rest shared by three others: hc-3 is the coldest.
    const plan = Array.from({ length: 60 }, (_, i) => (i % 2 === 0 ? 'hc-0' : i % 6 === 1 ? 'hc-1' : i % 6 === 3 ? 'hc-2' : 'hc-3'));
    const answered = new Set<string>();
    const slow: string[] = [];
    for (const model of plan) {
      const t = performance.now();
      await ask(openai, model);
      // A request for an adapter already served (so loaded somewhere) must not wait for a load (0.5 s).
      if (answered.has(model) && performance.now() - t > 400) slow.push(model);
      answered.add(model);
    }
    await new Promise((r) => setTimeout(r, 700));
    const [onA, onB] = [await loadedOn(a), await loadedOn(b)];
    expect(onA).toContain('hc-0');
    expect(onB).toContain('hc-0');
    expect([...onA, ...onB].filter((n) => n === 'hc-3')).toHaveLength(1);
    expect(slow).toEqual([]);
  });

  it('serves an adapter added to the catalog file at once; one removed is unloaded everywhere, then 404 naming the known ones', async () => {
    const specs = adapters(3, 'cat');
    const file = join(dir, 'catalog.yaml');
    const write = (list: AdapterSpec[]) =>
      writeFileSync(
        file,
        `models:\n  - name: demo\n    source: engine://llmgw/fake-demo\n    profiles:\n      - {name: p, engine: fake, gpuClass: H100, gpusPerNode: 1, adapters: {maxLoaded: 3}}\n    adapters:\n` +
          list.map((a) => `      - {name: ${a.name}, source: ${a.source}}\n`).join(''),
      );
    write(specs.slice(0, 2));
    const source = createCatalogSource(file);
    const [a, b] = [await engine({ lora }), await engine({ lora })];
    const { openai } = await router(
      [
        { servedName: 'demo', endpoint: url(a) },
        { servedName: 'demo', endpoint: url(b) },
      ],
      { adapters: adapterCatalog(source) },
    );
    await expect(ask(openai, 'cat-2')).rejects.toMatchObject({ status: 404 });
    write(specs);
    expect((await ask(openai, 'cat-2')).model).toBe('cat-2');
    await ask(openai, 'cat-0');
    write(specs.slice(1));
    const t = performance.now();
    while ([...(await loadedOn(a)), ...(await loadedOn(b))].includes('cat-0') && performance.now() - t < 3000)
      await new Promise((r) => setTimeout(r, 50));
    expect([...(await loadedOn(a)), ...(await loadedOn(b))]).not.toContain('cat-0');
    const refused = await ask(openai, 'cat-0').catch((err: { status: number; message: string }) => err);
    expect(refused).toMatchObject({ status: 404 });
    expect((refused as { message: string }).message).toMatch(/demo: cat-1, cat-2/);
    source.close();
  });

  it('serves adapters from an engine that requires a key, the key on every call the router makes there', async () => {
    const KEY = 'engine-key-for-adapters';
    const specs = adapters(2, 'ek');
    const a = await engine({ lora, apiKey: KEY });
    // In front of the engine: every call the router makes, and whether it carried the key.
    const calls: string[] = [];
    const proxy = createServer((req, res) => {
      calls.push(`${req.method ?? ''} ${req.url ?? ''} ${req.headers.authorization === `Bearer ${KEY}` ? 'key' : 'NO KEY'}`);
      const upstream = request({ host: '127.0.0.1', port: a.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      req.pipe(upstream);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = proxy.address() as AddressInfo;
      const { openai } = await router([{ servedName: 'demo', endpoint: `http://127.0.0.1:${port}` }], {
        engineKey: KEY,
        adapters: () => new Map([['demo', specs]]),
      });
      expect((await ask(openai, 'ek-0')).model).toBe('ek-0');
      expect((await ask(openai, 'ek-1')).model).toBe('ek-1');
      expect((await loadedOn(a, KEY)).sort()).toEqual(['ek-0', 'ek-1']);
      await new Promise((r) => setTimeout(r, 300));
      const paths = new Set(calls.map((c) => c.split(' ')[1]));
      for (const path of ['/v1/load_lora_adapter', '/v1/models', '/metrics', '/v1/chat/completions']) expect(paths).toContain(path);
      expect(calls.filter((c) => c.endsWith('NO KEY'))).toEqual([]);
    } finally {
      proxy.closeAllConnections();
      await new Promise((resolve) => proxy.close(resolve));
    }
  });

  it('answers a failed load 502 with the engine reason', async () => {
    const [bad] = [{ name: 'broken', source: join(dir, 'does-not-exist') }];
    const a = await engine({ lora });
    const { openai } = await router([{ servedName: 'demo', endpoint: url(a) }], { adapters: () => new Map([['demo', [bad]]]) });
    await expect(ask(openai, 'broken')).rejects.toMatchObject({ status: 502, message: expect.stringMatching(/No adapter found/) });
  });

  it('follows an engine restart within a second, and requests keep succeeding, also while it is down', async () => {
    const specs = adapters(2, 'rs');
    const a = await engine({ lora });
    const b = await engine({ lora });
    const running = await router(
      [
        { servedName: 'demo', endpoint: url(a) },
        { servedName: 'demo', endpoint: url(b) },
      ],
      { adapters: () => new Map([['demo', specs]]) },
    );
    const { openai } = running;
    // Hot: on both replicas.
    for (let i = 0; i < 30; i++) await ask(openai, 'rs-0');
    await new Promise((r) => setTimeout(r, 700));
    expect(await loadedOn(a)).toContain('rs-0');
    const port = a.port;
    const { admin } = running;
    const loadedAt = async (e: string) => routerMetric(admin, `llmgw_router_adapters_loaded{endpoint="${e}"}`);
    expect(await loadedAt(url(a))).toBeGreaterThan(0);
    await a.close(0);
    engines.splice(engines.indexOf(a), 1);
    const failures: unknown[] = [];
    for (let i = 0; i < 10; i++) await ask(openai, 'rs-0').catch((err: unknown) => failures.push(err));
    const restarted = await startFakeEngine(fakeEngineOptions({ model: 'demo', port, lora }));
    engines.push(restarted);
    const restartedAt = performance.now();
    // The router's view follows the engine, which lost everything: within a second.
    while ((await loadedAt(url(restarted))) > 0 && performance.now() - restartedAt < 2000) await new Promise((r) => setTimeout(r, 20));
    expect(performance.now() - restartedAt).toBeLessThan(1000);
    for (let i = 0; i < 20; i++) await ask(openai, i % 2 ? 'rs-0' : 'rs-1').catch((err: unknown) => failures.push(err));
    expect(failures).toEqual([]);
  });
});
