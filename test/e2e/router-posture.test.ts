// `llmgw router` as an operator starts it: on a reachable address with no API key it refuses
// to start and says how to proceed; with keys (and limits from the keys file) it serves, and a
// key over its limit gets 429 with Retry-After; no answer names the engine, and /metrics is only
// on the admin listener, by default a 0600 Unix socket (no TCP port nobody named). Real
// processes, static routes (no Temporal). And (issue 37) a router that reads Temporal without
// the control worker's public key refuses to start, naming --catalog-key and --insecure-routes;
// with --insecure-routes it serves unsigned routes (from a stand-in Temporal) and both its
// /health answers say so.
import { mkdtempSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findFreePort } from '../../common/ports.js';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { startFakeTemporal, type FakeTemporal } from '../helpers/fake-temporal.js';
import { eventually, runLlmgw, spawnLlmgw, stopAll } from '../helpers/processes.js';

let engine: FakeEngine | undefined;
let temporal: FakeTemporal | undefined;
afterAll(async () => {
  await stopAll();
  await engine?.close(0);
  await temporal?.close();
});

/** A router's environment with no key anywhere (the harness gives every process the run's key). */
const NO_KEY = { LLMGW_CATALOG_PUBLIC_KEY_FILE: '', LLMGW_CATALOG_KEY_FILE: '' };

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
      // No admin listener: this case is about the public one.
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
      { LLMGW_API_KEYS: '', XDG_RUNTIME_DIR: dir },
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
    // Nothing tells the client where the engine is; /metrics is on the admin socket only.
    expect(first.headers.get('x-llmgw-endpoint')).toBeNull();
    expect([...first.headers.values()].join(' ')).not.toContain(String(engine?.port));
    expect((await fetch(`http://127.0.0.1:${port}/metrics`)).status).toBe(404);
    expect(await (await fetch(`http://127.0.0.1:${port}/health`)).json()).toEqual({ status: 'ok' });
    const socketPath = join(dir, 'llmgw', `router-${port}.sock`);
    expect(statSync(socketPath).mode & 0o777).toBe(0o600);
    expect(await statusOver(socketPath, '/metrics')).toBe(200);
    const second = await ask();
    expect(second.status).toBe(429);
    expect(Number(second.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(((await second.json()) as { error: { code: string } }).error.code).toBe('rate_limit_exceeded');
    expect(router.output()).not.toContain('sk-posture-test');
    await router.stop();
  });
});

describe('routers secure by default', () => {
  it('a router reading Temporal with no --catalog-key refuses to start, naming --catalog-key and --insecure-routes', async () => {
    const port = await findFreePort();
    // Given 20 s: a router that starts anyway would still be running, and be killed (code null).
    const refused = await runLlmgw(
      ['router', '--host', '127.0.0.1', '--port', String(port), '--admin-addr', 'off'],
      { ...NO_KEY, TEMPORAL_ADDRESS: '127.0.0.1:1' },
      20_000,
    );
    expect(refused.output).toContain('--catalog-key');
    expect(refused.output).toContain('--insecure-routes');
    expect(refused.output).not.toMatch(/listening on/);
    expect(typeof refused.code, refused.output).toBe('number');
    expect(refused.code).not.toBe(0);
  });

  it('with --insecure-routes it installs unsigned routes, warns, and says "insecure" in both /health answers', async () => {
    const served = await startFakeEngine(fakeEngineOptions({ model: 'unsigned-demo' }));
    temporal = await startFakeTemporal({
      epoch: 'fake-epoch',
      version: 1,
      routes: [
        {
          replicaId: 'replica/unsigned/1',
          deployment: 'unsigned',
          servedName: 'unsigned-demo',
          endpoint: `http://127.0.0.1:${served.port}`,
          phase: 'Ready',
        },
      ],
      deployments: [],
    });
    const port = await findFreePort();
    const admin = await findFreePort();
    const router = spawnLlmgw(
      ['router', '--host', '127.0.0.1', '--port', String(port), '--admin-addr', `127.0.0.1:${admin}`, '--insecure-routes'],
      { ...NO_KEY, TEMPORAL_ADDRESS: temporal.address },
    );
    try {
      await router.waitForOutput(/listening on/, 30_000);
      expect(router.output()).toMatch(/WARNING --insecure-routes: routes and deployments are installed unsigned/);
      await eventually(
        'the unsigned route is served',
        async () =>
          (
            await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ model: 'unsigned-demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
            })
          ).status === 200,
        20_000,
        200,
      );
      const insecure = expect.stringMatching(/^routes: unsigned routes are installed \(--insecure-routes\)/);
      expect(await (await fetch(`http://127.0.0.1:${port}/health`)).json()).toEqual({ status: 'ok', insecure });
      expect(await (await fetch(`http://127.0.0.1:${admin}/health`)).json()).toMatchObject({ insecure });
    } finally {
      await router.stop();
      await served.close(0);
    }
  });
});

/** GET `path` from an HTTP server on a Unix socket: its status. */
function statusOver(socketPath: string, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get({ socketPath, path }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      })
      .on('error', reject);
  });
}
