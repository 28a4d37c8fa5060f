// A keys file edited under a running router (issue 39): a tenant's new weight and a key's new
// priority order the held line from the next request, without a restart
// (router/http/key-reload.ts); a file that gives one tenant two weights is refused at reload,
// naming both lines, and the keys read before stay in force. One engine slot, so the order
// requests are answered in is the order they left the router's line.
import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadApiKeys } from '../../router/http/auth.js';
import { watchApiKeys, type KeyReloader } from '../../router/http/key-reload.js';
import { engine, router, url, useRouterHarness } from '../helpers/router-harness.js';
import { waitFor } from '../helpers/poll.js';
import { ask, learnCapacity, running } from '../helpers/flow-rig.js';

useRouterHarness();
const reloaders: KeyReloader[] = [];
afterEach(() => reloaders.splice(0).forEach((w) => w.stop()));

const A = 'sk-tenant-a-0123456789';
const B = 'sk-tenant-b-0123456789';
const HOLD = 'sk-holder-0123456789';
const NEW = 'sk-newcomer-0123456789';

const entry = (key: string, tenant: string, extra: Record<string, unknown> = {}) => JSON.stringify({ key, tenant, ...extra });

/** Replaced by a rename, as an editor or a mounted secret does: the watch sees a new file. */
function writeKeys(file: string, lines: string[]): void {
  writeFileSync(`${file}.new`, `${lines.join('\n')}\n`, { mode: 0o600 });
  renameSync(`${file}.new`, file);
}

describe('a keys file changed under a running router', () => {
  it('applies a new weight and a new priority without a restart, and keeps the old keys when a tenant has two weights', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'llmgw-flow-keys-')), 'keys');
    writeKeys(file, [entry(A, 'a', { weight: 1 }), entry(B, 'b', { weight: 1 }), entry(HOLD, 'hold')]);
    const read = () => loadApiKeys({ file, env: {} });
    const e = await engine({ maxConcurrency: 1, tokensPerSecond: 40 });
    const r = await router([{ servedName: 'demo', endpoint: url(e) }], {
      apiKeys: read(),
      scrapeIntervalMs: 50,
      queue: { saturatedWaiting: 0 },
    });
    const logs: string[] = [];
    const watch = watchApiKeys({ file, read, apply: (keys) => r.router.replaceApiKeys(keys), log: (l) => logs.push(l), intervalMs: 50 });
    reloaders.push(watch);
    const reloaded = async (count: number) => waitFor(() => logs.length >= count);
    await learnCapacity(r.base, e, 1, HOLD);

    /** Four requests of A then four of B held behind a busy slot; the tenants in the order they were answered. */
    const order = async (): Promise<string> => {
      const holder = ask(r.base, { key: HOLD, maxTokens: 20 });
      await running(r.router, 1);
      const answered: string[] = [];
      const all: Array<Promise<void>> = [];
      for (const [key, name] of [...Array(4).fill([A, 'a']), ...Array(4).fill([B, 'b'])] as Array<[string, string]>) {
        const before = r.router.health().queued.demo ?? 0;
        all.push(
          ask(r.base, { key }).then(async (res) => {
            expect(res.status).toBe(200);
            await res.arrayBuffer();
            answered.push(name);
          }),
        );
        await waitFor(() => (r.router.health().queued.demo ?? 0) > before);
      }
      await (await holder).arrayBuffer();
      await Promise.all(all);
      return answered.join('');
    };

    // Equal weights: start-time fair queueing takes the tenants in turn.
    expect(await order()).toBe('abababab');
    // A's weight 3: after the first of each, three of A for each one of B (stamps 1/3 apart against 1).
    writeKeys(file, [entry(A, 'a', { weight: 3 }), entry(B, 'b', { weight: 1 }), entry(HOLD, 'hold')]);
    await reloaded(1);
    expect(logs[0]).toMatch(/API keys reloaded .*3 kept/);
    expect(await order()).toBe('abaaabbb');
    // B's key made critical: all of B's before any of A's.
    writeKeys(file, [entry(A, 'a', { weight: 3 }), entry(B, 'b', { weight: 1, priority: 'critical' }), entry(HOLD, 'hold')]);
    await reloaded(2);
    expect(await order()).toBe('bbbbaaaa');

    // Tenant a given two weights (lines 1 and 4), with a new key: refused, naming both lines.
    writeKeys(file, [entry(A, 'a', { weight: 3 }), entry(B, 'b', { weight: 1 }), entry(HOLD, 'hold'), entry(NEW, 'a', { weight: 2 })]);
    await reloaded(3);
    expect(logs[2]).toContain('not reloaded');
    expect(logs[2]).toContain(`${file}:4`);
    expect(logs[2]).toContain(`${file}:1`);
    // The keys read before still apply: the new key is unknown, and B is still critical.
    expect((await ask(r.base, { key: NEW })).status).toBe(401);
    expect(await order()).toBe('bbbbaaaa');
  });
});
