// The control worker's half of fetch revocation (activities/weights-permits.ts): a weights permit
// per host, signed only for a revision of ours that the catalog still allows, that the agent's
// fetch check takes for that host alone; and when a catalog edit has every node reconciled
// (workers/catalog-notifier.ts: only when it allows less).
import { describe, expect, it } from 'vitest';
import { parseCatalog } from '../../catalog/load.js';
import type { Catalog } from '../../catalog/schema.js';
import { createWeightsPermitActivities } from '../../activities/weights-permits.js';
import { createFetchCheck } from '../../agent/weights/fetch-check.js';
import { readCatalogKeys } from '../../common/catalog-key.js';
import { FailureType } from '../../common/failures.js';
import { signSnapshot } from '../../common/revision-signature.js';
import { revisionOf } from '../../common/revision.js';
import { withdraws } from '../../workers/catalog-notifier.js';
import { testCatalogKeyFile, testPublicKeyFile } from '../helpers/catalog-key.js';
import { snapshotOf } from '../helpers/rollout.js';

const SOURCE = `hf://org/model@${'c'.repeat(40)}`;
const { revision: _revision, ...SNAPSHOT } = snapshotOf({ model: 'm', profile: 'p', modelSource: SOURCE });
const REVISION = revisionOf(SNAPSHOT);

function catalogOf(revoked: string[]): Catalog {
  const yaml = `models:\n  - name: m\n    source: hf://org/model\n    profiles:\n      - { name: p, engine: fake, gpuClass: H100, gpusPerNode: 1 }\n${revoked.length ? `revoked: [${revoked.join(', ')}]\n` : ''}`;
  const parsed = parseCatalog(yaml);
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.errors));
  return parsed.catalog;
}

const permitsUnder = (catalog: Catalog) =>
  createWeightsPermitActivities({ get: () => catalog, close: () => undefined }, testCatalogKeyFile()).signWeightsPermits;

describe('weights permits', () => {
  it('are signed per host for a live revision, and each fetches on its own host only', async () => {
    const profile = signSnapshot(SNAPSHOT, readCatalogKeys(testCatalogKeyFile()));
    const permits = await permitsUnder(catalogOf([]))({ nodes: ['gpu-a', 'gpu-b'], profile });
    expect(Object.keys(permits)).toEqual(['gpu-a', 'gpu-b']);
    const checkOn = (node: string) => createFetchCheck({ kind: 'keys', file: testPublicKeyFile() }, node);
    const fetch = { modelSource: SOURCE, replicaId: 'prefetch of m', profile };
    expect(() => checkOn('gpu-a')({ ...fetch, permit: permits['gpu-a'] })).not.toThrow();
    expect(() => checkOn('gpu-a')({ ...fetch, permit: permits['gpu-b'] })).toThrow(/permit is for node gpu-b/);
  });

  it('are refused for a revoked revision, and for one the control worker did not sign', async () => {
    const profile = signSnapshot(SNAPSHOT, readCatalogKeys(testCatalogKeyFile()));
    const refused = await permitsUnder(catalogOf([REVISION]))({ nodes: ['gpu-a'], profile }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ type: FailureType.UnsignedRevision, nonRetryable: true });
    expect((refused as Error).message).toMatch(new RegExp(`revision ${REVISION} is revoked in the catalog; nothing is fetched`));
    const forged = await permitsUnder(catalogOf([]))({ nodes: ['gpu-a'], profile: { ...profile, args: ['--evil'] } }).catch(
      (e: unknown) => e,
    );
    expect((forged as Error).message).toMatch(/its revision does not verify/);
  });

  it('has every node reconciled only when the catalog allows less', () => {
    const allows = (profiles: string[], revoked: string[]) => JSON.stringify([profiles, revoked]);
    expect(withdraws(allows(['m/p', 'm/q'], []), allows(['m/p'], []))).toBe(true);
    expect(withdraws(allows(['m/p'], []), allows(['m/p'], ['r-0123456789']))).toBe(true);
    expect(withdraws(allows(['m/p'], []), allows(['m/p', 'm/q'], []))).toBe(false);
    expect(withdraws(allows(['m/p'], ['r-0123456789']), allows(['m/p'], []))).toBe(false);
  });
});
