// Pinning, on the control worker: a hub source (hf://ORG/NAME, or a bare ORG/NAME) at a branch
// (or none) becomes the commit the branch points at now, so that every replica of the revision, wherever and whenever it is
// placed, runs the same bytes. The pinned source is part of the signed profile. The hub is the
// worker's HF_ENDPOINT; a gated repo needs the worker's HF_TOKEN. A file:// source holding GGUF
// files is pinned to their digest (common/file-digest.ts), read where the worker mounts it.
import { ApplicationFailure } from '@temporalio/client';
import { HUB_URL, modelInfo } from '@huggingface/hub';
import { FailureType } from '../common/failures.js';
import { formatModelSource, isPinned, modelSourceOf } from '../common/model-source.js';
import { pinS3Source } from './s3-pin.js';
import { ggufDigest } from '../common/file-digest.js';

interface HubErrorShape {
  statusCode?: number;
}

/** A deployment's current pin, which a resolve keeps while the catalog's source is unchanged. */
export interface KeepPin {
  modelSource: string;
  sourceAsWritten?: string;
}

/**
 * The source a resolve should use: the pin it is asked to keep when the catalog still names the
 * same source (so a plain rollout, a profile change or an automatic rollout never moves the
 * weights under a deployment), else the catalog's source pinned now.
 */
export async function pinOrKeep(written: string, keep: KeepPin | undefined, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  if (keep && sameSourceAsPinned(written, keep)) return keep.modelSource;
  return pinModelSource(written, env);
}

function sameSourceAsPinned(written: string, keep: KeepPin): boolean {
  if (keep.sourceAsWritten !== undefined) return keep.sourceAsWritten === written;
  // Pinned before the catalog's text was recorded: the same repository at a moving ref.
  const now = modelSourceOf(written);
  const pinned = modelSourceOf(keep.modelSource);
  return now.kind === 'hf' && pinned.kind === 'hf' && now.repo === pinned.repo && !isPinned(now);
}

export async function pinModelSource(text: string, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const source = modelSourceOf(text);
  if (source.kind === 's3' && !isPinned(source)) return pinS3Source(source, env);
  if (source.kind === 'file' && !isPinned(source)) return pinFileSource(source.path, text);
  if (source.kind !== 'hf' || isPinned(source)) return text;
  const hubUrl = env.HF_ENDPOINT?.replace(/\/+$/, '');
  try {
    const info = await modelInfo({
      name: source.repo,
      ...(source.ref !== undefined ? { revision: source.ref } : {}),
      additionalFields: ['sha'],
      ...(hubUrl ? { hubUrl } : {}),
      ...(env.HF_TOKEN ? { accessToken: env.HF_TOKEN } : {}),
    });
    const sha = (info as { sha?: unknown }).sha;
    if (typeof sha !== 'string' || !/^[0-9a-f]{40}$/.test(sha)) throw new Error(`the hub answered no commit for ${text}`);
    return formatModelSource({ kind: 'hf', repo: source.repo, ref: sha });
  } catch (error) {
    const status = (error as HubErrorShape | undefined)?.statusCode;
    const said = error instanceof Error ? error.message.split('. URL:')[0] : String(error);
    if (status === 401 || status === 403) {
      throw ApplicationFailure.nonRetryable(
        env.HF_TOKEN
          ? `the hub refused the control worker's HF_TOKEN for ${source.repo} (${said}): give it a token with access to ${source.repo}; agents need one too (--pass-env HF_TOKEN)`
          : `the hub needs a token for ${source.repo} (${said}): set HF_TOKEN for the control worker, and for agents with --pass-env HF_TOKEN`,
        FailureType.WeightsUnavailable,
      );
    }
    if (status === 404) {
      throw ApplicationFailure.nonRetryable(`${text}: no such revision on the hub (${said})`, FailureType.WeightsUnavailable);
    }
    if (status === undefined) {
      // No answer at all: retried a few times (resolveDeployment), then the deploy fails with this.
      const cause = (error as { cause?: { code?: string; message?: string } } | undefined)?.cause;
      const why = cause?.code ?? cause?.message;
      throw new Error(
        `cannot reach the hub at ${hubUrl ?? HUB_URL} to pin ${text} to a commit (${said}${why ? `: ${why}` : ''}): set HF_ENDPOINT for the control worker (and the agents) to a hub they can reach, or give the model a source that needs none: file:///PATH (a directory every host mounts) or engine://${source.repo} (the engine downloads it itself, unpinned, as a bare id did before 0.3.0)`,
        { cause: error },
      );
    }
    throw error;
  }
}

/**
 * A file:// source with its GGUF digest; as written (used in place, unpinned, as before 0.3.0)
 * when it holds no GGUF or the control worker does not mount the path.
 */
async function pinFileSource(path: string, text: string): Promise<string> {
  let digest: string | undefined;
  try {
    digest = await ggufDigest(path);
  } catch (error) {
    // A folder whose GGUF links lead out of it is refused (common/listing-paths.ts), not used unpinned.
    if (error instanceof ApplicationFailure) throw error;
    return text;
  }
  return digest ? formatModelSource({ kind: 'file', path, digest }) : text;
}
