// The control worker's seal on carried state: sealCarriedState and openCarriedState, run as local
// activities by a long-running workflow at its continue-as-new and at the start of the run it
// continues into (workflows/carried.ts). Control side: the key is the catalog signing key's
// (common/carried-seal.ts), which only control workers hold.
import { Context } from '@temporalio/activity';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { readCatalogKeys } from '../common/catalog-key.js';
import { openCarried, sealCarried, type SealBinding } from '../common/carried-seal.js';
import { predates, versionOfBuild } from '../common/build-version.js';

/** The first llmgw version whose runs seal what they carry: older builds hand over unsealed. */
export const SEALED_SINCE = '0.3.0';

export interface SealRequest {
  /** `runId`: the run that seals. */
  binding: SealBinding;
  input: unknown;
}

export interface OpenRequest {
  /** `runId`: the run this one continues from. */
  binding: SealBinding;
  input: unknown;
  seal?: string;
  upgrading?: boolean;
}

export type OpenVerdict = { ok: true; how: 'sealed' | 'unkeyed' | 'upgrade'; note?: string } | { ok: false; why: string };

function activityQueue(): string | undefined {
  try {
    return Context.current().info.taskQueue;
  } catch {
    return undefined;
  }
}

/**
 * A hand-over from a build older than sealing: accepted only when the run it continues from is
 * this very workflow type, on this control plane's own task queue, and ran a versioned llmgw
 * build before SEALED_SINCE. A workflow of anyone else's continuing as new is none of these (its
 * type or queue differ), whatever it sets `upgrading` to; the next hand-over of the chain is
 * sealed by this build, so a chain takes an unsealed state once.
 */
async function unsealedUpgrade(client: Client, binding: SealBinding): Promise<OpenVerdict> {
  const description = await client.workflow
    .getHandle(binding.workflowId, binding.runId)
    .describe()
    .catch((error: unknown) => {
      if (error instanceof WorkflowNotFoundError) return undefined;
      throw error;
    });
  if (!description) return { ok: false, why: `it carries no seal, and the run it continues from (${binding.runId}) is not found` };
  const queue = activityQueue();
  if (description.type !== binding.workflowType || (queue !== undefined && description.taskQueue !== queue)) {
    return {
      ok: false,
      why: `it continues from a ${description.type} run on task queue ${description.taskQueue}, not a ${binding.workflowType} of this control plane`,
    };
  }
  const versioning = description.raw.workflowExecutionInfo?.versioningInfo;
  const buildId = versioning?.deploymentVersion?.buildId ?? versioning?.deployment?.buildId ?? '';
  if (!versionOfBuild(buildId) || !predates(buildId, SEALED_SINCE)) {
    return { ok: false, why: `it carries no seal, and the run it continues from ran build ${buildId || '(unversioned)'}, which seals` };
  }
  return { ok: true, how: 'upgrade', note: `an unsealed hand-over from build ${buildId}, accepted once` };
}

export function createCarriedStateActivities(client: Client, catalogKeyFile: string | undefined) {
  return {
    /** The seal for the next run's input; none without a key (nothing is signed then either). */
    async sealCarriedState({ binding, input }: SealRequest): Promise<string | undefined> {
      if (catalogKeyFile === undefined) return undefined;
      return sealCarried(readCatalogKeys(catalogKeyFile), binding, input);
    },
    /** Whether a continued run may act on what it was handed. */
    async openCarriedState({ binding, input, seal, upgrading }: OpenRequest): Promise<OpenVerdict> {
      if (catalogKeyFile === undefined) return { ok: true, how: 'unkeyed' };
      const verdict = openCarried(readCatalogKeys(catalogKeyFile), binding, input, seal);
      if (verdict.ok) return { ok: true, how: 'sealed' };
      if (seal === undefined && upgrading) return unsealedUpgrade(client, binding);
      return verdict;
    },
  };
}
