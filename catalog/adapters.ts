// LoRA adapters in the catalog: what a model lists (name, source, rank), what a profile allows
// (adapters an engine holds at once, their highest rank), the checks `catalog validate` runs,
// and the engine flags a profile that allows adapters adds. Pure; control plane and router.
import { z } from 'zod';
import { LORA_SOURCES_ENV } from '../common/names.js';
import type { Catalog } from './schema.js';

/** A fine-tune of the model: clients send `name` as `model`; `source` is the path the engine loads. */
export const CatalogAdapter = z.strictObject({
  name: z
    .string()
    .regex(
      /^[A-Za-z0-9][A-Za-z0-9._:/-]*$/,
      'an adapter name must start with a letter or digit and hold only letters, digits, ".", "_", ":", "/" and "-"',
    ),
  source: z.string().min(1, 'source must name the adapter weights (a path the engine can read)'),
  /** Its LoRA rank, when known: checked against the profile's maxRank. */
  rank: z.int().min(1).optional(),
});
export type CatalogAdapter = z.infer<typeof CatalogAdapter>;

/** How many adapters one engine of the profile holds at once, and the highest rank it takes. */
export const ProfileAdapters = z.strictObject({
  maxLoaded: z.int().min(1),
  maxRank: z.int().min(1).default(16),
});
export type ProfileAdapters = z.infer<typeof ProfileAdapters>;

interface ModelShape {
  adapters?: readonly CatalogAdapter[] | undefined;
  profiles: ReadonlyArray<{ name: string; adapters?: ProfileAdapters | undefined }>;
}

/** A model's adapter issues: a rank over a profile's maxRank, adapters no profile can load, duplicates. */
export function checkModelAdapters(model: ModelShape, ctx: z.RefinementCtx): void {
  const adapters = model.adapters ?? [];
  if (adapters.length === 0) return;
  const able = model.profiles.filter((p) => p.adapters !== undefined);
  if (able.length === 0) {
    ctx.addIssue({
      code: 'custom',
      path: ['adapters'],
      message: `the model lists adapters but none of its profiles (${model.profiles.map((p) => p.name).join(', ')}) allows them: give one "adapters: {maxLoaded: N}"`,
    });
  }
  const seen = new Map<string, number>();
  adapters.forEach((adapter, i) => {
    const first = seen.get(adapter.name);
    if (first !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['adapters', i, 'name'],
        message: `duplicate adapter name "${adapter.name}" (first used at adapters[${first}])`,
      });
    } else seen.set(adapter.name, i);
    if (adapter.rank === undefined) return;
    for (const profile of able) {
      const maxRank = (profile.adapters as ProfileAdapters).maxRank;
      if (adapter.rank > maxRank) {
        ctx.addIssue({
          code: 'custom',
          path: ['adapters', i, 'rank'],
          message: `adapter ${adapter.name} has rank ${adapter.rank}, over profile ${profile.name}'s adapters.maxRank ${maxRank}`,
        });
      }
    }
  });
}

/** Adapter names share the namespace clients send as `model`: none may be a model's served name or another model's adapter. */
export function checkAdapterNames(catalog: Catalog, ctx: z.RefinementCtx): void {
  const served = new Set(catalog.models.flatMap((m) => [m.name, m.servedName ?? m.name]));
  const owner = new Map<string, string>();
  catalog.models.forEach((model, i) => {
    (model.adapters ?? []).forEach((adapter, j) => {
      const path = ['models', i, 'adapters', j, 'name'];
      if (served.has(adapter.name))
        ctx.addIssue({ code: 'custom', path, message: `adapter name "${adapter.name}" is also a model's name` });
      const other = owner.get(adapter.name);
      if (other !== undefined && other !== model.name) {
        ctx.addIssue({ code: 'custom', path, message: `adapter name "${adapter.name}" is also an adapter of model ${other}` });
      }
      owner.set(adapter.name, model.name);
    });
  });
}

/**
 * The engine flags and variables of a profile that allows adapters: vLLM's runtime LoRA API
 * (--enable-lora, --max-loras, --max-lora-rank and VLLM_ALLOW_RUNTIME_LORA_UPDATING) or
 * SGLang's (--enable-lora, --max-loras-per-batch, --max-lora-rank), and LLMGW_LORA_SOURCES: the
 * sources the model lists, the only ones its engines load. That list is in the env, so the
 * revision's signature covers it and an engine started from a signed revision refuses a load of
 * any other directory, whoever asks; the price is that adding an adapter is a new revision
 * (docs/adapters.md).
 */
export function adapterEngineArgs(
  engine: 'vllm' | 'sglang' | 'fake' | 'llamacpp',
  adapters: ProfileAdapters | undefined,
  listed: readonly CatalogAdapter[] = [],
): { args: string[]; env: Record<string, string> } {
  if (adapters === undefined) return { args: [], env: {} };
  const rank = ['--max-lora-rank', String(adapters.maxRank)];
  // Sorted and unique, so that reordering the catalog's list is not a new revision.
  const sources = { [LORA_SOURCES_ENV]: JSON.stringify([...new Set(listed.map((a) => a.source))].sort()) };
  switch (engine) {
    case 'vllm':
    case 'fake':
      return {
        args: ['--enable-lora', '--max-loras', String(adapters.maxLoaded), ...rank],
        env: { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True', ...sources },
      };
    case 'sglang':
      return { args: ['--enable-lora', '--max-loras-per-batch', String(adapters.maxLoaded), ...rank], env: sources };
    case 'llamacpp':
      // The catalog refuses adapters on a llamacpp profile (schema.ts): llama-server takes them only at start.
      throw new Error('engine llamacpp has no run-time LoRA adapters');
  }
}

/** Base model (catalog name) → its adapters, for the router. */
export function adaptersByModel(catalog: Catalog): Map<string, CatalogAdapter[]> {
  return new Map(catalog.models.filter((m) => (m.adapters ?? []).length > 0).map((m) => [m.name, [...(m.adapters ?? [])]]));
}

/** The router's view of a live catalog: the same map while the file is unchanged, a new one after an edit. */
export function adapterCatalog(source: { get(): Catalog }): () => ReadonlyMap<string, readonly CatalogAdapter[]> {
  let seen: Catalog | undefined;
  let map: ReadonlyMap<string, readonly CatalogAdapter[]> = new Map();
  return () => {
    const catalog = source.get();
    if (catalog !== seen) {
      seen = catalog;
      map = adaptersByModel(catalog);
    }
    return map;
  };
}
