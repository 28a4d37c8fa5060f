// The fake engine's test harness: engines started in-process on free ports and closed after each
// test (useFakeEngineHarness), an OpenAI client for one, and its /health and /metrics.
import OpenAI from 'openai';
import { afterEach } from 'vitest';
import { fakeEngineOptions, type FakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';

export const running: FakeEngine[] = [];

export function useFakeEngineHarness(): void {
  afterEach(async () => {
    await Promise.all(running.splice(0).map((e) => e.close(0)));
  });
}

export async function start(overrides: Partial<FakeEngineOptions> = {}, hooks = {}): Promise<FakeEngine> {
  const engine = await startFakeEngine(fakeEngineOptions({ model: 'fake/tiny', ...overrides }), hooks);
  running.push(engine);
  return engine;
}

export const base = (e: FakeEngine) => `http://127.0.0.1:${e.port}`;
export const client = (e: FakeEngine) => new OpenAI({ baseURL: `${base(e)}/v1`, apiKey: 'x', maxRetries: 0 });

export async function health(e: FakeEngine): Promise<number> {
  return (await fetch(`${base(e)}/health`)).status;
}

export async function metric(e: FakeEngine, name: string): Promise<number> {
  const text = await (await fetch(`${base(e)}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`));
  if (!line) throw new Error(`no ${name} in /metrics`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}
