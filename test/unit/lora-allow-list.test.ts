// Runtime LoRA loads only of sources the signed catalog lists (issue 37): an engine the agent
// starts from a catalog revision with adapters refuses a load of any other directory sent
// straight to it, and the list is part of what the revision's signature covers.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatCatalogErrors, parseCatalog } from '../../catalog/load.js';
import { profileSnapshot, profileToEngineProfile } from '../../catalog/lookup.js';
import { LORA_SOURCES_ENV } from '../../common/names.js';
import { readCatalogKeys } from '../../common/catalog-key.js';
import { verifyRevision } from '../../common/revision-signature.js';
import { signWithTestKey, testCatalogKeyFile } from '../helpers/catalog-key.js';
import { agentHost, fakeSpec, tempDir, useSupervisorHarness } from '../helpers/supervisor.js';

useSupervisorHarness();

/** A catalog of one fake-engine model allowing adapters, listing `sources` in this order. */
function catalogWith(sources: string[]) {
  const lines = sources.map((s, i) => `      - {name: ft-${i}, source: ${JSON.stringify(s)}}\n`).join('');
  const text = `models:
  - name: base
    source: llmgw/fake-demo
    servedName: demo
    profiles:
      - name: p1
        engine: fake
        gpuClass: H100
        gpusPerNode: 1
        args: ["--load-time", "0"]
        adapters: {maxLoaded: 4}
    adapters:
${lines}`;
  const parsed = parseCatalog(text, 'c.yaml');
  if (!parsed.ok) throw new Error(formatCatalogErrors(parsed.errors, 'c.yaml'));
  const model = parsed.catalog.models[0]!;
  return { model, profile: model.profiles[0]! };
}

function adapterDir(root: string, name: string): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify({ r: 8 }));
  return dir;
}

async function load(endpoint: string, name: string, path: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://${endpoint}/v1/load_lora_adapter`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ lora_name: name, lora_path: path }),
  });
  return { status: res.status, text: await res.text() };
}

describe('runtime LoRA loads', () => {
  it('an engine started from a catalog revision loads a listed adapter and refuses any other directory sent straight to it', async () => {
    const root = tempDir();
    const listed = adapterDir(root, 'sql-ft');
    const other = adapterDir(root, 'someone-elses');
    const { model, profile } = catalogWith([listed]);
    const { node, startAgent } = await agentHost('lora-allow');
    const { sup } = startAgent();
    const spec = fakeSpec(node, 'demo.70.r0.a1', [], [0]);
    spec.profile = profileToEngineProfile(model, profile);
    await sup.start(spec);
    const { endpoint } = await sup.waitHealthy(spec.shardId, 20);

    // A directory the catalog does not list, under a tenant's adapter name, and the listed
    // directory reached through `..`: both refused, and neither is served.
    for (const path of [other, join(listed, '..', 'someone-elses')]) {
      const refused = await load(endpoint, 'ft-0', path);
      expect(refused.status, path).toBe(400);
      expect(refused.text).toMatch(/is not an adapter source this deployment's catalog lists/);
    }
    const models = (await (await fetch(`http://${endpoint}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toEqual(['demo']);

    const ok = await load(endpoint, 'ft-0', listed);
    expect(ok).toMatchObject({ status: 200 });
    expect(ok.text).toMatch(/added successfully/);
  });

  it('puts the listed sources in the signed revision: another list does not verify, reordering is the same revision', () => {
    const ab = catalogWith(['/adapters/a', '/adapters/b']);
    const ba = catalogWith(['/adapters/b', '/adapters/a']);
    expect(profileSnapshot(ba.model, ba.profile).env[LORA_SOURCES_ENV]).toBe(JSON.stringify(['/adapters/a', '/adapters/b']));
    const keys = readCatalogKeys(testCatalogKeyFile()).all;
    const signed = signWithTestKey(profileToEngineProfile(ab.model, ab.profile));
    expect(verifyRevision(signed, keys).ok).toBe(true);
    signed.env[LORA_SOURCES_ENV] = JSON.stringify(['/adapters/a', '/adapters/b', '/home/attacker/ft']);
    expect(verifyRevision(signed, keys).ok).toBe(false);
  });
});
