// Routers install only routes the control worker signed (issue 26, points 1 and 2): a route
// signed with the private key passes, an unsigned one, one moved to another endpoint, and one
// signed with a key of the thief's own under the real key's id are dropped, and said so once.
// Deployments likewise (issue 37): an unsigned or altered one is neither listed nor an alias.
// And a router reading Temporal with no key is refused at its flags unless --insecure-routes.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { newKeyPairLines, publicKeyFileOf, readCatalogKeys } from '../../common/catalog-key.js';
import { autoscalePolicy } from '../../common/autoscale.js';
import { signDeployment, signRoute } from '../../common/route-signature.js';
import { parseRouterFlags } from '../../router/flags.js';
import { buildModelRoutes, type DeploymentEntry } from '../../router/routes/table.js';
import { VerifiedRouteSource } from '../../router/routes/verify.js';
import type { RouteEntry, RouteSnapshot, RouteSource } from '../../router/routes/table.js';
import { workerKey } from '../helpers/signers.js';

function sourceOf(routes: RouteEntry[], deployments: DeploymentEntry[] = []): RouteSource {
  return { description: 'test', fetch: async (): Promise<RouteSnapshot> => ({ routes, deployments }), close: async () => undefined };
}

describe('signed routes at the router', () => {
  it('installs signed routes only', async () => {
    const { file, keys: worker } = workerKey();
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

describe('signed deployments at the router', () => {
  it('lists and aliases signed deployments only', async () => {
    const { file, keys } = workerKey();
    const route: RouteEntry = {
      replicaId: 'replica/small/1',
      deployment: 'small',
      servedName: 'small-model',
      endpoint: 'http://198.18.0.7:30001',
      phase: 'Ready',
      revision: 'r1',
    };
    const genuine: DeploymentEntry = {
      name: 'small',
      servedName: 'small-model',
      model: 'small-model',
      phase: 'Idle',
      desired: 0,
      autoscale: autoscalePolicy({ min: 0, max: 2, idleToZeroSeconds: 60 }),
    };
    const signed = { ...genuine, signature: signDeployment(genuine, keys) };
    // Someone asking for "big-model" would be served small-model: the substitution signatures stop.
    const alias: DeploymentEntry = { ...genuine, name: 'big-model' };
    const logs: string[] = [];
    const source = new VerifiedRouteSource(
      sourceOf(
        [{ ...route, signature: signRoute(route, keys) }],
        [
          signed,
          alias,
          { ...alias, name: 'huge-model', signature: signed.signature },
          { ...signed, autoscale: { ...signed.autoscale!, max: 64 } },
        ],
      ),
      publicKeyFileOf(file),
      (line) => logs.push(line),
    );
    const table = await source.fetch();
    expect(table.deployments).toEqual([signed]);
    const names = buildModelRoutes(table.routes, table.deployments);
    expect([...names.keys()].sort()).toEqual(['small', 'small-model']);
    expect(logs.join('\n')).toMatch(/not listing deployment big-model \(as small-model\): its entry is unsigned/);
    expect(logs.join('\n')).toMatch(/not listing deployment huge-model .*not what the control worker signed/);
    await source.fetch();
    expect(logs).toHaveLength(3);
  });
});

describe('a router without a key', () => {
  const noKey = {};
  it('refuses to read Temporal unless told --insecure-routes; static routes need none', () => {
    expect(() => parseRouterFlags({ host: '127.0.0.1' }, noKey)).toThrow(/--catalog-key FILE.*--insecure-routes/);
    const insecure = parseRouterFlags({ host: '127.0.0.1', insecureRoutes: true }, noKey);
    expect([insecure.catalogKey, insecure.insecureRoutes]).toEqual([undefined, true]);
    const fromEnv = parseRouterFlags(
      { host: '127.0.0.1', insecureRoutes: true },
      { LLMGW_CATALOG_PUBLIC_KEY_FILE: '/keys/catalog.key.pub' },
    );
    expect([fromEnv.catalogKey, fromEnv.insecureRoutes]).toEqual(['/keys/catalog.key.pub', false]);
    const fixed = parseRouterFlags({ host: '127.0.0.1', staticRoutes: 'demo=http://127.0.0.1:9' }, noKey);
    expect([fixed.catalogKey, fixed.insecureRoutes]).toEqual([undefined, false]);
  });
});
