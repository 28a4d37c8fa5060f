// The fake engine's sleep API answers as vLLM v0.34.0's dev routes do: only in dev mode, only
// when started able to sleep, with its bodies and its refusals (docs/fake-engine-vs-vllm.md).
import { afterEach, describe, expect, it } from 'vitest';
import { fakeEngineOptions, type FakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';

const engines: FakeEngine[] = [];
afterEach(async () => {
  for (const engine of engines.splice(0)) await engine.close(0);
});

async function engine(over: Partial<FakeEngineOptions>): Promise<string> {
  const started = await startFakeEngine(fakeEngineOptions({ wakeSeconds: 0.2, ...over }));
  engines.push(started);
  return `http://127.0.0.1:${started.port}`;
}

async function call(base: string, method: string, path: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${base}${path}`, { method });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : (JSON.parse(text) as unknown) };
}

describe("the fake engine's sleep routes", () => {
  it('are not there without VLLM_SERVER_DEV_MODE, and refuse to sleep without --enable-sleep-mode', async () => {
    expect((await call(await engine({ sleepMode: true }), 'GET', '/is_sleeping')).status).toBe(404);
    const devOnly = await engine({ devMode: true });
    expect(await call(devOnly, 'GET', '/is_sleeping')).toEqual({ status: 200, body: { is_sleeping: false } });
    const refused = await call(devOnly, 'POST', '/sleep');
    expect(refused.status).toBe(500);
    expect(JSON.stringify(refused.body)).toMatch(/--enable-sleep-mode/);
  });

  it('sleep, wake by tags and wake answer with vLLM’s bodies, and bad levels and modes are refused', async () => {
    const base = await engine({ sleepMode: true, devMode: true });
    expect((await call(base, 'POST', '/sleep?level=3')).status).toBe(400);
    expect((await call(base, 'POST', '/sleep?mode=later')).status).toBe(400);
    expect((await call(base, 'POST', '/wake_up?tags=everything')).status).toBe(400);
    expect((await call(base, 'GET', '/sleep')).status).toBe(405);
    expect(await call(base, 'POST', '/sleep?level=2&mode=wait')).toEqual({ status: 200, body: { status: 'sleeping', level: 2 } });
    expect((await call(base, 'GET', '/is_sleeping')).body).toEqual({ is_sleeping: true });
    expect((await call(base, 'GET', '/health')).status).toBe(200);
    expect(await call(base, 'POST', '/wake_up?tags=weights')).toEqual({
      status: 200,
      body: { status: 'sleeping', tags_woken: ['weights'] },
    });
    const started = Date.now();
    expect(await call(base, 'POST', '/wake_up')).toEqual({ status: 200, body: { status: 'awake', tags_woken: null } });
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
    expect((await call(base, 'GET', '/is_sleeping')).body).toEqual({ is_sleeping: false });
  });
});
