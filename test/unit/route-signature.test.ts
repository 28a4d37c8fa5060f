// Routers install only routes the control worker signed (issue 26, points 1 and 2): a route
// signed with the private key passes, an unsigned one, one moved to another endpoint, and one
// signed with a key of the thief's own under the real key's id are dropped, and said so once.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ensureCatalogKeyFile, newKeyPairLines, publicKeyFileOf, readCatalogKeys } from '../../common/catalog-key.js';
import { signRoute } from '../../common/route-signature.js';
import { VerifiedRouteSource } from '../../router/routes-verify.js';
import type { RouteEntry, RouteSnapshot, RouteSource } from '../../router/routes.js';

function sourceOf(routes: RouteEntry[]): RouteSource {
  return { description: 'test', fetch: async (): Promise<RouteSnapshot> => ({ routes, deployments: [] }), close: async () => undefined };
}

describe('signed routes at the router', () => {
  it('installs signed routes only', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'llmgw-route-sig-')), 'catalog.key');
    ensureCatalogKeyFile(file);
    const worker = readCatalogKeys(file);
    const genuine: RouteEntry = {
      replicaId: 'replica/demo/1',
      deployment: 'demo',
      servedName: 'demo',
      endpoint: 'http://198.18.0.7:30001',
      phase: 'Ready',
      revision: 'r1',
    };
    const signed = { ...genuine, signature: signRoute(genuine, worker) };
    const thiefFile = join(mkdtempSync(join(tmpdir(), 'llmgw-route-thief-')), 'own.key');
    writeFileSync(thiefFile, `${newKeyPairLines().privateLine}\n`);
    const thief = readCatalogKeys(thiefFile);
    const attacker = { ...genuine, replicaId: 'replica/demo/9', endpoint: 'http://203.0.113.9:8000' };
    const forged = { ...attacker, signature: signRoute(attacker, { ...thief, signing: { ...thief.signing!, id: worker.signing!.id } }) };
    const logs: string[] = [];
    const source = new VerifiedRouteSource(
      sourceOf([
        signed,
        { ...genuine, replicaId: 'replica/demo/2' },
        { ...signed, endpoint: 'http://203.0.113.9:8000' },
        forged,
        { ...attacker, phase: 'Stopped' },
      ]),
      publicKeyFileOf(file),
      (line) => logs.push(line),
    );
    const table = await source.fetch();
    expect(table.routes.map((r) => `${r.replicaId} ${r.endpoint} ${r.phase}`)).toEqual([
      'replica/demo/1 http://198.18.0.7:30001 Ready',
      'replica/demo/9 http://203.0.113.9:8000 Stopped',
    ]);
    expect(logs.join('\n')).toMatch(/not routing demo to replica\/demo\/2: its route is unsigned/);
    expect(logs.join('\n')).toMatch(/not routing demo to replica\/demo\/9: its route is not what the control worker signed/);
    await source.fetch();
    expect(logs).toHaveLength(3);
    expect(() => new VerifiedRouteSource(sourceOf([]), file, () => undefined)).toThrow(/holds a private Ed25519 key/);
  });
});
