// Which held revision a model source names: the key a host's report of its weights cache, the
// node's memo and placement agree on (`repo@commit`; for S3 `s3://BUCKET/PREFIX@<digest hex>`,
// as the host cache names it). Pure; safe to import from workflows.
import { formatModelSource, isFetched, isPinned, modelSourceOf, pinnedRevisionOf } from './model-source.js';
import { heldWeightsKey } from './node-types.js';

/** The held-weights key of a pinned, fetched source; undefined for one llmgw does not cache (engine://, file://, unpinned). */
export function heldKeyOfSource(text: string): string | undefined {
  const source = modelSourceOf(text);
  if (!isFetched(source) || !isPinned(source)) return undefined;
  const repo =
    source.kind === 'hf'
      ? source.repo
      : formatModelSource({ kind: 's3', bucket: source.bucket, prefix: source.prefix.replace(/\/+$/, '') });
  return heldWeightsKey(repo, pinnedRevisionOf(source));
}

/** The source a held revision was fetched from, as a catalog writes it pinned. */
export function sourceOfHeld(repo: string, commit: string): string {
  return repo.startsWith('s3://') ? `${repo}@sha256:${commit}` : formatModelSource({ kind: 'hf', repo, ref: commit });
}
