// Where a model's weights come from: the parser of a catalog `source` (hf://, s3://, file://,
// engine://, or a bare hub id, which is hf://) and its pinned form. Pure, so the catalog,
// workflows and agents share it.

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

/** A directory (or one file) on a filesystem every host mounts: used in place, never copied. */
export interface FileSource {
  kind: 'file';
  path: string;
  /**
   * The pinned digest of its GGUF files (`@sha256:…`, common/file-digest.ts), set at deploy when
   * it holds any; each agent checks it before an engine reads them.
   */
  digest?: string;
}

/**
 * Handed to the engine as `name`, which downloads or finds it itself: not pinned, not cached,
 * not verified by llmgw. Written `engine://NAME` in a catalog (for an engine that needs no
 * weights, as the fake engine in tests, or hosts that provide their own); also what a revision
 * made before sources had schemes (0.2.0) carries when its source is no hub id or path.
 */
export interface EngineSource {
  kind: 'engine';
  name: string;
}

export type ModelSource = HubSource | S3Source | FileSource | EngineSource;

export const SOURCE_SCHEMES = ['hf://', 's3://', 'file://', 'engine://'] as const;

const REPO = /^[A-Za-z0-9][A-Za-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._-]*$/;
const REF = /^[A-Za-z0-9][A-Za-z0-9._/-]*$/;
const COMMIT = /^[0-9a-f]{40}$/;
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;

export type SourceParse = { ok: true; source: ModelSource } | { ok: false; message: string };

/**
 * Parses a catalog `source`; a refusal says what was expected, since a person wrote it. A
 * source without a scheme is a hub id (`ORG/NAME[@REF]`, read as `hf://ORG/NAME[@REF]`: pinned,
 * fetched and cached by llmgw) or an absolute path (read as `file:///PATH`); nothing else.
 */
export function parseModelSource(text: string): SourceParse {
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(text)?.[1];
  if (scheme === undefined) {
    if (text.startsWith('/')) return parseModelSource(`file://${text}`);
    const hub = parseModelSource(`hf://${text}`);
    if (hub.ok) return hub;
    return {
      ok: false,
      message: `source ${JSON.stringify(text)}: a source without a scheme is a hub id ORG/NAME (as hf://ORG/NAME) or an absolute path (as file:///PATH); to hand it to the engine as written, unpinned and uncached, write engine://${text}`,
    };
  }
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
      const pinned = /@(sha256:[0-9a-f]{64})$/.exec(rest);
      const path = pinned ? rest.slice(0, pinned.index) : rest;
      if (!path.startsWith('/') || path.split('/').includes('..')) {
        return { ok: false, message: `source ${JSON.stringify(text)}: expected file:///ABSOLUTE/PATH (three slashes, no "..")` };
      }
      return { ok: true, source: { kind: 'file', path: path.replace(/\/+$/, '') || '/', ...(pinned ? { digest: pinned[1] } : {}) } };
    }
    case 'engine': {
      if (rest.trim() === '')
        return { ok: false, message: `source ${JSON.stringify(text)}: expected engine://NAME, what the engine is given` };
      return { ok: true, source: { kind: 'engine', name: rest } };
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
      return `file://${source.path}${source.digest ? `@${source.digest}` : ''}`;
    case 'engine':
      return `engine://${source.name}`;
    default: {
      const unknown: never = source;
      throw new Error(`unknown source ${JSON.stringify(unknown)}`);
    }
  }
}

/**
 * A revision's source (passed catalog validation, pinned since). Or throws; but never for a
 * source without a scheme, which a revision made by 0.2.0 may carry as its engine was given it
 * (its replicas, moved to this release, keep running): one that is no hub id or path is an
 * EngineSource.
 */
export function modelSourceOf(text: string): ModelSource {
  const parsed = parseModelSource(text);
  if (parsed.ok) return parsed.source;
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(text) && text.trim() !== '') return { kind: 'engine', name: text };
  throw new Error(parsed.message);
}

/**
 * Whether llmgw fetches the weights onto each host before the engine starts: a hub or S3
 * source pinned at deploy (every deploy and rollout pins them). An unpinned hub source in a
 * revision is a bare ORG/NAME from a release before pinning (0.2.0), when it meant "the
 * engine downloads it": it keeps that meaning until the deployment is rolled out (modelArgOf).
 */
export function isFetchedByLlmgw(source: ModelSource): boolean {
  return isFetched(source) && isPinned(source);
}

/** What an engine not given a local directory is given: the hub id, a path, or an engine:// source's name. */
export function modelArgOf(source: ModelSource): string {
  switch (source.kind) {
    case 'hf':
      return source.ref !== undefined && !isPinned(source) ? `${source.repo}@${source.ref}` : source.repo;
    case 'file':
      return source.path;
    case 'engine':
      return source.name;
    case 's3':
      return formatModelSource(source);
    default: {
      const unknown: never = source;
      throw new Error(`unknown source ${JSON.stringify(unknown)}`);
    }
  }
}

/** Whether llmgw fetches sources of this kind (once pinned: isFetchedByLlmgw). */
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
      return source.digest !== undefined;
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
