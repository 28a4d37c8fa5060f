// The control worker signs deployment entries, and only true ones: whatever a deploymentChanged
// signal says, the entry it signs is read from the deployment workflow itself (a running
// deployModel on this worker's own task queue, so its code is ours). A deployment's name is an
// alias of its served name at every router, so a forged entry would substitute one model for
// another without a word (docs/security.md). Control side; routers verify (router/routes/verify.ts).
import { Context } from '@temporalio/activity';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { AUTOSCALE_METRICS, autoscalePolicy, type AutoscalePolicy } from '../common/autoscale.js';
import { readCatalogKeys } from '../common/catalog-key.js';
import { deploymentWorkflowId } from '../common/names.js';
import type { AutoscaleView } from '../common/replica-types.js';
import { signDeployment } from '../common/route-signature.js';
import { deploymentStatusQuery } from '../workflows/definitions.js';
import type { DeploymentEntry } from '../workflows/routes/definitions.js';

type Verdict = { entry: DeploymentEntry } | { refused: string };

function activityQueue(): string | undefined {
  try {
    return Context.current().info.taskQueue;
  } catch {
    return undefined;
  }
}

/** The policy a view shows; a deployment of an earlier release shows no timings: the defaults. */
function policyOf(view: AutoscaleView): AutoscalePolicy {
  const metric = AUTOSCALE_METRICS.find((m) => m === view.metric);
  return autoscalePolicy({
    min: view.min,
    max: view.max,
    ...(metric ? { metric } : {}),
    target: view.target,
    ...(view.idleToZeroSeconds !== undefined ? { idleToZeroSeconds: view.idleToZeroSeconds } : {}),
    ...(view.upAfterSeconds !== undefined ? { upAfterSeconds: view.upAfterSeconds } : {}),
    ...(view.downAfterSeconds !== undefined ? { downAfterSeconds: view.downAfterSeconds } : {}),
    ...(view.tolerance !== undefined ? { tolerance: view.tolerance } : {}),
  });
}

/**
 * The deployment `entry` names, as its own workflow shows it, signed; `Undeployed` when no such
 * deployment runs; or why it is refused. Without a key file, `entry` as it came (unsigned).
 */
export async function trueDeployment(client: Client, entry: DeploymentEntry, catalogKeyFile: string | undefined): Promise<Verdict> {
  if (catalogKeyFile === undefined) return { entry };
  const { signature: _ignored, ...claimed } = entry;
  const handle = client.workflow.getHandle(deploymentWorkflowId(entry.name));
  let description;
  try {
    description = await handle.describe();
  } catch (error) {
    if (error instanceof WorkflowNotFoundError) return { entry: { ...claimed, phase: 'Undeployed' } };
    throw error;
  }
  if (description.status.name !== 'RUNNING') return { entry: { ...claimed, phase: 'Undeployed' } };
  const queue = activityQueue();
  if (description.type !== 'deployModel' || (queue !== undefined && description.taskQueue !== queue)) {
    return {
      refused: `${description.workflowId} is a ${description.type} workflow on task queue ${description.taskQueue}, not a deployment this control plane runs`,
    };
  }
  const view = await handle.query(deploymentStatusQuery);
  const truth: DeploymentEntry = {
    name: entry.name,
    servedName: view.servedName,
    model: view.model,
    phase: view.phase,
    desired: view.desired,
    ...(view.autoscale ? { autoscale: policyOf(view.autoscale) } : {}),
    ...(view.sleep ? { sleep: view.sleep } : {}),
  };
  return { entry: { ...truth, signature: signDeployment(truth, readCatalogKeys(catalogKeyFile)) } };
}

export function createDeploymentSigningActivities(client: Client, catalogKeyFile: string | undefined, log: (line: string) => void) {
  return {
    /** Each entry as its deployment's state has it, signed (in order); entries that cannot be verified are left out. */
    async signDeployments(entries: DeploymentEntry[]): Promise<DeploymentEntry[]> {
      const out: DeploymentEntry[] = [];
      for (const entry of entries) {
        const verdict = await trueDeployment(client, entry, catalogKeyFile);
        if ('entry' in verdict) out.push(verdict.entry);
        else log(`routes: not signing deployment ${entry.name} (served as ${entry.servedName}): ${verdict.refused}`);
      }
      return out;
    },
  };
}
