// Which held revision a model source names: the key a host's report of its weights cache, the
// node's memo and placement agree on (`repo@commit`). Pure; safe to import from workflows.
import { isFetched, modelSourceOf } from './model-source.js';
import { heldWeightsKey } from './node-types.js';

/** The held-weights key of a pinned, fetched source; undefined for one llmgw does not cache (bare id, file://, unpinned). */
export function heldKeyOfSource(text: string): string | undefined {
  const source = modelSourceOf(text);
  if (!isFetched(source) || source.kind !== 'hf' || source.ref === undefined) return undefined;
  return heldWeightsKey(source.repo, source.ref);
}
