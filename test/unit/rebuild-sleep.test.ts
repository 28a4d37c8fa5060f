// What sleep policy reconciliation gives a replica it rebuilds around running engines
// (activities/reconcile-rebuild.ts withCatalogSleep): the catalog's, only for an engine started
// able to sleep as that policy starts one. Pure: a catalog in memory, snapshots as engines report them.
import { describe, expect, it } from 'vitest';
import { parseCatalog } from '../../catalog/load.js';
import { profileSnapshot } from '../../catalog/lookup.js';
import type { Catalog } from '../../catalog/schema.js';
import { snapshotFromEngineProfile, engineProfileFromSnapshot } from '../../common/profile-conversion.js';
import { withCatalogSleep } from '../../activities/reconcile-rebuild.js';

function catalog(sleep: string, engine = 'fake'): Catalog {
  const parsed = parseCatalog(`models:
  - name: m
    source: engine://m
    profiles:
      - name: p
        engine: ${engine}
        gpuClass: X
        gpusPerNode: 1
        args: ["--load-time", "0"]
${sleep ? `        sleep: ${sleep}\n` : ''}`);
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.errors));
  return parsed.catalog;
}

/** The snapshot as reconciliation reads it back from a running engine's spec: no timings. */
function running(from: Catalog) {
  const model = from.models[0]!;
  return snapshotFromEngineProfile(engineProfileFromSnapshot(profileSnapshot(model, model.profiles[0]!)));
}

describe('a rebuilt replica sleep policy', () => {
  it('is the catalog profile policy when the engine was started able to sleep', () => {
    const now = catalog('{ afterSeconds: 60, level: 2, minAwakeSeconds: 5 }');
    const snapshot = running(now);
    expect(snapshot.sleep).toBeUndefined();
    expect(withCatalogSleep(now, snapshot).sleep).toEqual({ afterSeconds: 60, level: 2, minAwakeSeconds: 5 });
  });

  it('is none for an engine started without the sleep flags, whatever the catalog says now', () => {
    const snapshot = running(catalog(''));
    expect(withCatalogSleep(catalog('{ afterSeconds: 60 }'), snapshot).sleep).toBeUndefined();
    expect(withCatalogSleep(catalog(''), snapshot).sleep).toBeUndefined();
  });

  it('is none on llama.cpp when the engine idles on another afterSeconds (another revision)', () => {
    const snapshot = running(catalog('{ afterSeconds: 60 }', 'llamacpp'));
    expect(withCatalogSleep(catalog('{ afterSeconds: 60 }', 'llamacpp'), snapshot).sleep?.afterSeconds).toBe(60);
    expect(withCatalogSleep(catalog('{ afterSeconds: 90 }', 'llamacpp'), snapshot).sleep).toBeUndefined();
  });
});
