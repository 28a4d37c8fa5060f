// Revocation, control side: whether a signed revision is still live, asked each time the control
// worker signs a placement ticket, renews one or signs a route. Live means: one its deployment
// runs now (its revision, or either side of a rollout in progress), as the deployment workflow
// itself answers; whose model and profile the catalog file still lists and does not revoke; and
// signed with a key the control worker still holds. Never taken from the caller's copy, so an
// old signature copied out of a history starts and routes nothing (docs/signed-statements.md).
import { ApplicationFailure, WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Catalog } from '../catalog/schema.js';
import type { CatalogKey } from '../common/catalog-key.js';
import { deploymentWorkflowId, WorkflowType } from '../common/names.js';
import type { DeploymentView } from '../common/replica-types.js';
import { deploymentStatusQuery } from '../workflows/definitions.js';

/** Why the catalog no longer allows `revision` of this model and profile, or undefined. */
export function catalogRefusal(catalog: Catalog, model: string, profile: string, revision: string): string | undefined {
  const entry = catalog.models.find((m) => m.name === model);
  if (!entry) return `model ${model} is no longer in the catalog`;
  if (!entry.profiles.some((p) => p.name === profile)) return `profile ${profile} of model ${model} is no longer in the catalog`;
  if (catalog.revoked?.includes(revision)) return `revision ${revision} is revoked in the catalog`;
  return undefined;
}

/** Why a revision signed `signature` is no longer live for its key alone (the key left the key file), or undefined. */
export function keyRefusal(signature: string, keys: CatalogKey[]): string | undefined {
  const keyId = /^v[12]\.([0-9a-f]{12})\./.exec(signature)?.[1];
  if (keyId && keys.some((k) => k.id === keyId)) return undefined;
  return `its revision was signed with key ${keyId ?? '(none)'}, which is no longer in the control worker's key file`;
}

/**
 * Why the revision signed `signature` may not start, restart or be routed for the deployment
 * `view` shows, or undefined when it may. An unsigned revision is left to the agent (only one
 * run --insecure-unsigned starts it, and such an agent checks nothing).
 */
export function revisionRefusal(
  view: DeploymentView,
  signature: string,
  catalog: Catalog | undefined,
  keys: CatalogKey[],
): string | undefined {
  if (signature === '') return undefined;
  const keyGone = keyRefusal(signature, keys);
  if (keyGone) return keyGone;
  // A deployment run of a build before revocation does not list its revisions: the catalog alone.
  if (view.revisions === undefined) return catalog && catalogRefusal(catalog, view.model, view.profile, view.revision ?? '');
  const live = view.revisions.find((r) => r.signature === signature);
  if (!live) {
    return `its revision is not one deployment ${view.name} runs now (${view.revisions.map((r) => r.revision).join(', ') || 'none'})`;
  }
  return catalog && catalogRefusal(catalog, view.model, live.profile, live.revision);
}

/**
 * The deployment's own view, when it is a running deployModel on `taskQueue` (any queue when
 * undefined); undefined otherwise. One that has not resolved its revision yet (a deployment
 * just rebuilt around running engines) is a retryable failure: it will know in a moment.
 */
export async function runningDeployment(
  client: Client,
  deployment: string,
  taskQueue: string | undefined,
): Promise<DeploymentView | undefined> {
  const handle = client.workflow.getHandle(deploymentWorkflowId(deployment));
  const description = await handle.describe().catch((error: unknown) => {
    if (error instanceof WorkflowNotFoundError) return undefined;
    throw error;
  });
  const ours = description?.type === WorkflowType.deployModel && (taskQueue === undefined || description.taskQueue === taskQueue);
  if (!description || description.status.name !== 'RUNNING' || !ours) return undefined;
  const view = await handle.query(deploymentStatusQuery);
  if (view.phase === 'Validating') {
    throw ApplicationFailure.retryable(`deployment ${deployment} has not resolved its revision yet`);
  }
  return view;
}
