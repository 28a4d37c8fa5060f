// LoRA adapters in the catalog: a rank over the profile's maximum is refused naming the field,
// adapters need a profile that allows them, names must not clash with models, and a profile
// that allows adapters gives the engine the runtime-LoRA flags.
import { describe, expect, it } from 'vitest';
import { formatCatalogErrors, parseCatalog } from '../../catalog/load.js';
import { profileSnapshot } from '../../catalog/lookup.js';
import { adapterCatalog } from '../../catalog/adapters.js';

const catalog = (engine: string, adapterLines: string, profileExtra = '        adapters: {maxLoaded: 3, maxRank: 16}\n') => `models:
  - name: base
    source: org/base
    profiles:
      - name: p1
        engine: ${engine}
        gpuClass: H100
        gpusPerNode: 1
${profileExtra}    adapters:
${adapterLines}`;

function errors(text: string): string {
  const result = parseCatalog(text, 'c.yaml');
  if (result.ok) throw new Error('expected a refusal');
  return formatCatalogErrors(result.errors, 'c.yaml');
}

describe('catalog adapters', () => {
  it('refuses an adapter whose rank is over the profile maxRank, naming the field', () => {
    const out = errors(catalog('vllm', '      - {name: sql, source: /a/sql, rank: 64}\n'));
    expect(out).toMatch(/models\[0\]\.adapters\[0\]\.rank/);
    expect(out).toMatch(/rank 64, over profile p1's adapters\.maxRank 16/);
  });

  it('refuses adapters on a model none of whose profiles allows them, and a name that is a model', () => {
    expect(errors(catalog('vllm', '      - {name: sql, source: /a/sql}\n', ''))).toMatch(/none of its profiles \(p1\) allows them/);
    expect(errors(catalog('vllm', '      - {name: base, source: /a/b}\n'))).toMatch(/adapter name "base" is also a model's name/);
  });

  it('gives vLLM the runtime LoRA flags and variable, SGLang its own, and lists adapters for the router', () => {
    for (const [engine, flag] of [
      ['vllm', '--max-loras'],
      ['sglang', '--max-loras-per-batch'],
    ] as const) {
      const result = parseCatalog(catalog(engine, '      - {name: sql, source: /a/sql, rank: 8}\n'));
      if (!result.ok) throw new Error(formatCatalogErrors(result.errors, 'c.yaml'));
      const model = result.catalog.models[0]!;
      const snap = profileSnapshot(model, model.profiles[0]!);
      expect(snap.args.slice(0, 5)).toEqual(['--enable-lora', flag, '3', '--max-lora-rank', '16']);
      expect(snap.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING).toBe(engine === 'vllm' ? 'True' : undefined);
      const source = { get: () => result.catalog };
      const read = adapterCatalog(source);
      expect(read().get('base')).toEqual([{ name: 'sql', source: '/a/sql', rank: 8 }]);
      expect(read()).toBe(read());
    }
  });
});
