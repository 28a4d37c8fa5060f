// A profile's sleep policy: parsed with its defaults, refused where an engine cannot sleep, and
// turned into the flags each engine is started with (so the revision changes exactly when
// what the engine is started with does).
import { describe, expect, it } from 'vitest';
import { formatCatalogErrors, parseCatalog } from '../../catalog/load.js';
import { chooseProfile, profileSnapshot } from '../../catalog/lookup.js';
import type { Catalog } from '../../catalog/schema.js';
import { revisionOf } from '../../common/revision.js';

function catalogOf(text: string): Catalog {
  const result = parseCatalog(text);
  if (!result.ok) throw new Error(formatCatalogErrors(result.errors, 'test.yaml'));
  return result.catalog;
}

const one = (engine: string, sleep: string) => `models:
  - name: demo
    source: llmgw/fake-demo
    profiles:
      - name: p
        engine: ${engine}
        gpuClass: H100
        gpusPerNode: 1
        args: ["--max-model-len", "4096"]
${sleep}`;

function snapshotOf(engine: string, sleep: string) {
  const choice = chooseProfile(catalogOf(one(engine, sleep)), 'demo');
  if (!choice.ok) throw new Error(choice.message);
  return profileSnapshot(choice.model, choice.profile);
}

describe('a profile that sleeps', () => {
  it('carries the policy with its defaults (level 1, awake at least 60 s) into the snapshot', () => {
    const snapshot = snapshotOf('fake', '        sleep: {afterSeconds: 300}');
    expect(snapshot.sleep).toEqual({ afterSeconds: 300, level: 1, minAwakeSeconds: 60 });
    const full = snapshotOf('vllm', '        sleep: {afterSeconds: 30, level: 2, stopAfterSeconds: 3600, minAwakeSeconds: 10}');
    expect(full.sleep).toEqual({ afterSeconds: 30, level: 2, stopAfterSeconds: 3600, minAwakeSeconds: 10 });
  });

  it('starts vLLM and the fake engine with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1, before the profile args', () => {
    for (const engine of ['vllm', 'fake']) {
      const snapshot = snapshotOf(engine, '        sleep: {afterSeconds: 300}');
      expect(snapshot.args).toEqual(['--enable-sleep-mode', '--max-model-len', '4096']);
      expect(snapshot.env).toEqual({ VLLM_SERVER_DEV_MODE: '1' });
    }
  });

  it('starts llama-server with --sleep-idle-seconds afterSeconds: it sleeps itself', () => {
    const snapshot = snapshotOf('llamacpp', '        sleep: {afterSeconds: 45}');
    expect(snapshot.args).toEqual(['--sleep-idle-seconds', '45', '--max-model-len', '4096']);
    expect(snapshot.env).toEqual({});
  });

  it('is a new revision when it changes the engine flags, and the same one when only the timings change', () => {
    const none = revisionOf(snapshotOf('vllm', ''));
    const sleeps = revisionOf(snapshotOf('vllm', '        sleep: {afterSeconds: 300}'));
    const later = revisionOf(snapshotOf('vllm', '        sleep: {afterSeconds: 900, level: 2, minAwakeSeconds: 5}'));
    expect(sleeps).not.toBe(none);
    expect(later).toBe(sleeps);
    // llama-server's idle time is its own flag, so there it is part of the revision.
    expect(revisionOf(snapshotOf('llamacpp', '        sleep: {afterSeconds: 45}'))).not.toBe(
      revisionOf(snapshotOf('llamacpp', '        sleep: {afterSeconds: 90}')),
    );
  });

  it('is refused on sglang, and with a bad level or a key it does not know, saying what to do', () => {
    const sglang = parseCatalog(one('sglang', '        sleep: {afterSeconds: 300}'));
    expect(sglang.ok).toBe(false);
    if (!sglang.ok) expect(sglang.errors.map((e) => e.message).join('\n')).toMatch(/engine sglang cannot sleep.*scale to zero/);
    const level = parseCatalog(one('vllm', '        sleep: {afterSeconds: 300, level: 3}'));
    expect(level.ok).toBe(false);
    if (!level.ok) expect(level.errors.map((e) => e.message).join('\n')).toMatch(/sleep.level must be 1.*or 2/);
    const typo = parseCatalog(one('vllm', '        sleep: {afterSecs: 300}'));
    expect(typo.ok).toBe(false);
    if (!typo.ok) expect(typo.errors.map((e) => e.message).join('\n')).toMatch(/unknown key "afterSecs" in sleep/);
  });
});
