// `llmgw router --api-keys-file` reads its keys again without a restart: a changed file (written
// elsewhere and renamed over it, as a mounted secret is) adds, removes and rescopes keys in every
// worker of a --workers cluster; a file that no longer parses changes nothing and says so by line,
// never by key; SIGHUP to the primary makes every worker read it again. Real processes, static
// routes (no Temporal), a fake engine.
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findFreePort } from '../../common/ports.js';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { spawnLlmgw, stopAll } from '../helpers/processes.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-key-reload-'));
let engine: FakeEngine | undefined;
afterAll(async () => {
  await stopAll();
  await engine?.close(0);
  rmSync(dir, { recursive: true, force: true });
});

const keysFile = join(dir, 'keys');
/** Written beside the file and renamed over it: the reader never sees half a file. */
function writeKeys(lines: string[]): void {
  const tmp = `${keysFile}.tmp`;
  writeFileSync(tmp, `${lines.join('\n')}\n`, { mode: 0o600 });
  renameSync(tmp, keysFile);
}

const SECRET = 'sk-reload-never-logged-0123';

describe('API keys reloaded', () => {
  it('from a changed file in every worker, keeping the old keys when it does not parse, and on SIGHUP', async () => {
    engine = await startFakeEngine(fakeEngineOptions({ model: 'demo' }));
    writeKeys(['sk-a', '{"key": "sk-b", "models": ["other"]}']);
    const port = await findFreePort();
    const router = spawnLlmgw(
      [
        'router',
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--admin-addr',
        'off',
        '--workers',
        '2',
        '--api-keys-file',
        keysFile,
        '--static-routes',
        `demo=http://127.0.0.1:${engine.port}`,
      ],
      { LLMGW_API_KEYS: '' },
    );
    await router.waitForOutput(/2 workers listening on/, 30_000);
    // Several connections, so that both workers answer.
    const statuses = async (key: string): Promise<number[]> =>
      Promise.all(
        Array.from({ length: 6 }, async () => {
          const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', connection: 'close' },
            body: JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
          });
          await res.arrayBuffer();
          return res.status;
        }),
      );
    const all = (status: number) => Array.from({ length: 6 }, () => status);
    expect(await statuses('sk-a')).toEqual(all(200));
    expect(await statuses('sk-b')).toEqual(all(404));
    expect(await statuses('sk-c')).toEqual(all(401));

    // sk-a removed, sk-b may now use every model, sk-c added.
    writeKeys(['{"key": "sk-b"}', 'sk-c']);
    await router.waitForOutput(/(API keys reloaded from \S+ \(\S+ changed\): 2 key\(s\): 1 added, 1 removed, 1 kept[^]*){2}/, 15_000);
    expect(await statuses('sk-c')).toEqual(all(200));
    expect(await statuses('sk-b')).toEqual(all(200));
    expect(await statuses('sk-a')).toEqual(all(401));

    // A mistake leaves the keys as they were, naming the line and never the key.
    writeKeys(['sk-c', `{"key": "${SECRET}", "model": ["demo"]}`]);
    await router.waitForOutput(/(API keys not reloaded \(\S+ changed\): \S+keys:2: unknown field[^]*){2}/, 15_000);
    expect(await statuses('sk-b')).toEqual(all(200));
    expect(router.output()).not.toContain(SECRET);

    // SIGHUP to the primary: each worker reads the file again, and none of them stops.
    writeKeys(['sk-c']);
    await router.waitForOutput(/(reloaded from \S+ \(\S+ changed\): 1 key\(s\): 0 added, 1 removed, 1 kept[^]*){2}/, 15_000);
    const before = router.output().match(/\(SIGHUP\)/g)?.length ?? 0;
    expect(before).toBe(0);
    process.kill(router.pid, 'SIGHUP');
    await router.waitForOutput(/(API keys reloaded from \S+ \(SIGHUP\): 1 key\(s\): 0 added, 0 removed, 1 kept[^]*){2}/, 15_000);
    expect(await statuses('sk-c')).toEqual(all(200));
    expect(await statuses('sk-b')).toEqual(all(401));
    await router.stop();
  });
});
