// `llmgw router` as an operator starts it: on a reachable address with no API key it refuses
// to start and says how to proceed; with keys (and limits from the keys file) it serves, and a
// key over its limit gets 429 with Retry-After; no answer names the engine, and /metrics is only
// on the loopback admin listener. Real processes, static routes (no Temporal).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findFreePort } from '../../common/ports.js';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { runLlmgw, spawnLlmgw, stopAll } from '../helpers/processes.js';

let engine: FakeEngine | undefined;
afterAll(async () => {
  await stopAll();
  await engine?.close(0);
});

describe('router posture', () => {
  it('refuses to serve 0.0.0.0 without API keys, naming --allow-unauthenticated; starts when allowed', async () => {
    const port = await findFreePort();
    const refused = await runLlmgw(['router', '--host', '0.0.0.0', '--port', String(port), '--static-routes', 'demo=http://127.0.0.1:9'], {
      LLMGW_API_KEYS: '',
    });
    expect(refused.code).not.toBe(0);
    expect(refused.output).toContain('--allow-unauthenticated');
    expect(refused.output).not.toMatch(/listening on/);

    const open = spawnLlmgw(
      // No admin listener: its default, the port after --port, is nobody's to promise free here.
      [
        'router',
        '--host',
        '0.0.0.0',
        '--port',
        String(port),
        '--admin-addr',
        'off',
        '--static-routes',
        'demo=http://127.0.0.1:9',
        '--allow-unauthenticated',
      ],
      { LLMGW_API_KEYS: '' },
    );
    await open.waitForOutput(/listening on/, 30_000);
    await open.stop();
  });

  it('serves with a keys file and answers 429 with Retry-After to a key over its limit', async () => {
    engine = await startFakeEngine(fakeEngineOptions({ model: 'demo' }));
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-router-keys-'));
    const keysFile = join(dir, 'keys');
    writeFileSync(keysFile, '# one key, one request a second\nsk-posture-test rps=1\n', { mode: 0o600 });
    const port = await findFreePort();
    const router = spawnLlmgw(
      [
        'router',
        '--host',
        '0.0.0.0',
        '--port',
        String(port),
        '--api-keys-file',
        keysFile,
        '--static-routes',
        `demo=http://127.0.0.1:${engine.port}`,
      ],
      { LLMGW_API_KEYS: '' },
    );
    await router.waitForOutput(/listening on/, 30_000);
    const ask = () =>
      fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: 'Bearer sk-posture-test', 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
      });
    const first = await ask();
    expect(first.status).toBe(200);
    await first.arrayBuffer();
    // Nothing tells the client where the engine is; /metrics is on 127.0.0.1:<port+1> only.
    expect(first.headers.get('x-llmgw-endpoint')).toBeNull();
    expect([...first.headers.values()].join(' ')).not.toContain(String(engine?.port));
    expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(404);
    expect(await (await fetch(`http://127.0.0.1:${port}/health`)).json()).toEqual({ status: 'ok' });
    expect((await fetch(`http://127.0.0.1:${port + 1}/metrics`)).status).toBe(200);
    const second = await ask();
    expect(second.status).toBe(429);
    expect(Number(second.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(((await second.json()) as { error: { code: string } }).error.code).toBe('rate_limit_exceeded');
    expect(router.output()).not.toContain('sk-posture-test');
    await router.stop();
  });
});
