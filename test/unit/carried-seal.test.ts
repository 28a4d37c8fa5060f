// The MAC on carried state (common/carried-seal.ts): it verifies only for the same state, workflow
// type, workflow id, run chain and sealing run; only a key that can sign makes or checks it (a
// verifier's public file cannot); a rotated-out key still opens what it sealed while it is kept.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ensureCatalogKeyFile, newKeyPairLines, publicKeyFileOf, readCatalogKeys, readVerifyingKeys } from '../../common/catalog-key.js';
import { canonicalJson, openCarried, sealCarried, type SealBinding } from '../../common/carried-seal.js';

const binding: SealBinding = { workflowType: 'replica', workflowId: 'replica/demo/1', firstExecutionRunId: 'first', runId: 'run-7' };
const input = {
  deployment: 'demo',
  seq: 1,
  carried: { phase: 'Ready', shards: [{ rank: 0, nodeId: 'n1', httpPort: 30001, ticket: 't' }], stopReason: undefined },
};

function keyFile(lines: string[]): string {
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-seal-')), 'catalog.key');
  writeFileSync(file, `${lines.join('\n')}\n`, { mode: 0o600 });
  return file;
}

describe('carried-state seal', () => {
  it('opens for the same state and hand-over, and for nothing else', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'llmgw-seal-')), 'catalog.key');
    ensureCatalogKeyFile(file);
    const ring = readCatalogKeys(file);
    const seal = sealCarried(ring, binding, input);
    expect(seal).toMatch(/^v1\.[0-9a-f]{12}\.[\w-]{43}$/);
    // Decoded again, keys in another order: the same bytes are MACed.
    const reordered = JSON.parse(JSON.stringify({ carried: input.carried, seq: 1, deployment: 'demo' })) as unknown;
    expect(openCarried(ring, binding, reordered, seal)).toEqual({ ok: true });

    const forged = { ...input, carried: { ...input.carried, shards: [{ ...input.carried.shards[0], httpPort: 30002 }] } };
    expect(openCarried(ring, binding, forged, seal).ok).toBe(false);
    for (const other of [
      { ...binding, workflowType: 'routes' },
      { ...binding, workflowId: 'replica/demo/2' },
      { ...binding, firstExecutionRunId: 'another-chain' },
      { ...binding, runId: 'run-8' },
    ]) {
      expect(openCarried(ring, other, input, seal).ok).toBe(false);
    }
    expect(openCarried(ring, binding, input, undefined)).toEqual({ ok: false, why: 'it carries no seal' });
    expect(openCarried(ring, binding, input, 'v1.0123456789ab.AAAA').ok).toBe(false);
    expect(openCarried(ring, binding, input, `${seal}.x`).ok).toBe(false);
    // The public file agents and routers hold can neither make nor check a seal.
    const verifier = readVerifyingKeys(publicKeyFileOf(file));
    expect(() => sealCarried(verifier, binding, input)).toThrow(/no key that can sign/);
    expect(openCarried(verifier, binding, input, seal).ok).toBe(false);
  });

  it('keeps opening what an older key sealed while the file still holds it (rotation)', () => {
    const old = newKeyPairLines().privateLine;
    const fresh = newKeyPairLines().privateLine;
    const seal = sealCarried(readCatalogKeys(keyFile([old])), binding, input);
    expect(openCarried(readCatalogKeys(keyFile([fresh, old])), binding, input, seal)).toEqual({ ok: true });
    expect(openCarried(readCatalogKeys(keyFile([fresh])), binding, input, seal)).toMatchObject({
      ok: false,
      why: expect.stringMatching(/does not hold/),
    });
  });

  it('seals with the legacy shared key too, and a MAC key unlike the key itself', () => {
    const hmac = 'x'.repeat(40);
    const ring = readCatalogKeys(keyFile([hmac]));
    const seal = sealCarried(ring, binding, input);
    expect(openCarried(ring, binding, input, seal)).toEqual({ ok: true });
    expect(seal).not.toContain(Buffer.from(hmac).toString('base64url'));
  });

  it('writes canonical JSON: sorted keys, undefined left out', () => {
    expect(canonicalJson({ b: 1, a: [1, undefined, { d: undefined, c: 'x' }] })).toBe('{"a":[1,null,{"c":"x"}],"b":1}');
  });
});
