// Where a model's weights come from: the parser of a catalog `source` (hf://, s3://, file://,
// or a bare hub id) and its pinned form. Pure, so the catalog, workflows and agents share it.

/** A repository on a Hugging Face Hub (the hub of the host's HF_ENDPOINT), at a ref or a commit. */
export interface HubSource {
  kind: 'hf';
  /** ORG/NAME */
  repo: string;
  /** A branch, tag or 40-hex commit; absent means the default branch. */
  ref?: string;
}

/** Objects under a prefix of an S3-compatible store (endpoint and credentials from the host). */
export interface S3Source {
  kind: 's3';
  bucket: string;
  prefix: string;
  /** The pinned digest over keys, sizes and ETags (`@sha256:…`), set at deploy. */
  digest?: string;
}

/** A directory on a filesystem every host mounts: verified and used in place, never copied. */
export interface FileSource {
  kind: 'file';
  path: string;
}

/**
 * A bare `ORG/NAME` (or any source without a scheme): handed to the engine as it always was
 * (the engine downloads it). llmgw fetches, pins and caches only sources written with a
 * scheme; see docs/weights.md.
 */
export interface EngineHubSource {
  kind: 'engine';
  repo: string;
}

export type ModelSource = HubSource | S3Source | FileSource | EngineHubSource;

export const SOURCE_SCHEMES = ['hf://', 's3://', 'file://'] as const;

const REPO = /^[A-Za-z0-9][A-Za-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._-]*$/;
const REF = /^[A-Za-z0-9][A-Za-z0-9._/-]*$/;
const COMMIT = /^[0-9a-f]{40}$/;
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;

export type SourceParse = { ok: true; source: ModelSource } | { ok: false; message: string };

/** Parses a catalog `source`; a refusal says what was expected, since a person wrote it. */
export function parseModelSource(text: string): SourceParse {
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(text)?.[1];
  // Without a scheme it is what the engine was always given (a hub id, or a path the engine
  // resolves itself); catalogs written before sources had schemes keep working unchanged.
  if (scheme === undefined) return { ok: true, source: { kind: 'engine', repo: text } };
  const rest = text.slice(scheme.length + 3);
  switch (scheme) {
    case 'hf': {
      const at = rest.indexOf('@');
      const repo = at < 0 ? rest : rest.slice(0, at);
      const ref = at < 0 ? undefined : rest.slice(at + 1);
      if (!REPO.test(repo)) return { ok: false, message: `source ${JSON.stringify(text)}: expected hf://ORG/NAME or hf://ORG/NAME@REF` };
      if (ref !== undefined && !REF.test(ref))
        return { ok: false, message: `source ${JSON.stringify(text)}: ${JSON.stringify(ref)} is not a branch, tag or commit` };
      return { ok: true, source: { kind: 'hf', repo, ...(ref !== undefined ? { ref } : {}) } };
    }
    case 's3': {
      const at = rest.lastIndexOf('@');
      const location = at < 0 ? rest : rest.slice(0, at);
      const digest = at < 0 ? undefined : rest.slice(at + 1);
      const slash = location.indexOf('/');
      const bucket = slash < 0 ? location : location.slice(0, slash);
      const prefix = slash < 0 ? '' : location.slice(slash + 1);
      if (!BUCKET.test(bucket))
        return { ok: false, message: `source ${JSON.stringify(text)}: expected s3://BUCKET/PREFIX with a valid bucket name` };
      if (digest !== undefined && !DIGEST.test(digest))
        return { ok: false, message: `source ${JSON.stringify(text)}: a pinned S3 source ends in @sha256:<64 hex>` };
      return { ok: true, source: { kind: 's3', bucket, prefix, ...(digest ? { digest } : {}) } };
    }
    case 'file': {
      if (!rest.startsWith('/') || rest.split('/').includes('..')) {
        return { ok: false, message: `source ${JSON.stringify(text)}: expected file:///ABSOLUTE/PATH (three slashes, no "..")` };
      }
      return { ok: true, source: { kind: 'file', path: rest.replace(/\/+$/, '') || '/' } };
    }
    default:
      return {
        ok: false,
        message: `source ${JSON.stringify(text)} has unknown scheme "${scheme}://" (expected ${SOURCE_SCHEMES.join(', ')}, or a bare hub id ORG/NAME)`,
      };
  }
}

/** The source as the catalog writes it; `parseModelSource(formatModelSource(s))` gives `s` back. */
export function formatModelSource(source: ModelSource): string {
  switch (source.kind) {
    case 'hf':
      return `hf://${source.repo}${source.ref !== undefined ? `@${source.ref}` : ''}`;
    case 's3':
      return `s3://${source.bucket}/${source.prefix}${source.digest ? `@${source.digest}` : ''}`;
    case 'file':
      return `file://${source.path}`;
    case 'engine':
      return source.repo;
    default: {
      const unknown: never = source;
      throw new Error(`unknown source ${JSON.stringify(unknown)}`);
    }
  }
}

/** Parses or throws (for sources that passed catalog validation and were pinned since). */
export function modelSourceOf(text: string): ModelSource {
  const parsed = parseModelSource(text);
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.source;
}

/** Whether llmgw fetches these weights onto each host before the engine starts. */
export function isFetched(source: ModelSource): source is HubSource | S3Source {
  return source.kind === 'hf' || source.kind === 's3';
}

/** Whether every replica of the revision gets byte-identical weights from this source as written. */
export function isPinned(source: ModelSource): boolean {
  switch (source.kind) {
    case 'hf':
      return source.ref !== undefined && COMMIT.test(source.ref);
    case 's3':
      return source.digest !== undefined;
    case 'file':
    case 'engine':
      return false;
    default: {
      const unknown: never = source;
      throw new Error(`unknown source ${JSON.stringify(unknown)}`);
    }
  }
}

/** The immutable name of a pinned revision: the hub commit or the S3 digest's hex. */
export function pinnedRevisionOf(source: HubSource | S3Source): string {
  if (!isPinned(source)) throw new Error(`source ${formatModelSource(source)} is not pinned to a revision`);
  return source.kind === 'hf' ? source.ref! : source.digest!.slice('sha256:'.length);
}
