// The autoscaler's two calls to Temporal: the `autoscale` Update (a new desired count, with its
// reason and signals) and `wake` (requests wait for a deployment at zero), on deployment/<name>.
// Each is refused by deployModel's validator when it changes nothing, and a refused Update is
// not recorded: several routers deciding the same count, or waking at once, cost no events.
// Router side; the primary of a cluster (or a single router) makes these calls.
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { deploymentWorkflowId } from '../../common/names.js';
import type { AutoscaleDecision } from '../../common/replica-types.js';
import { autoscaleUpdate, wakeUpdate } from '../../workflows/definitions.js';

export type Outcome = { accepted: true; desired: number } | { accepted: false; reason: string };

/** What the autoscaler asks of a deployment. Throws when Temporal cannot be reached (try again later). */
export interface DeploymentControl {
  decide(deployment: string, decision: AutoscaleDecision): Promise<Outcome>;
  wake(deployment: string, request: { reason: string; by: string }): Promise<Outcome>;
}

/**
 * An Update is answered once a worker has run its validator; while no control worker runs, the
 * call waits. This long, then it is given up and sent again on a later tick (the second copy is
 * refused if the first one landed meanwhile).
 */
const UPDATE_DEADLINE_MS = 15_000;

export class TemporalDeploymentControl implements DeploymentControl {
  constructor(private readonly client: () => Promise<Client>) {}

  decide(deployment: string, decision: AutoscaleDecision): Promise<Outcome> {
    return this.update(deployment, (handle) => handle.executeUpdate(autoscaleUpdate, { args: [decision] }));
  }

  wake(deployment: string, request: { reason: string; by: string }): Promise<Outcome> {
    return this.update(deployment, (handle) => handle.executeUpdate(wakeUpdate, { args: [request] }));
  }

  private async update(
    deployment: string,
    call: (handle: ReturnType<Client['workflow']['getHandle']>) => Promise<{ desired: number }>,
  ): Promise<Outcome> {
    const client = await this.client();
    const handle = client.workflow.getHandle(deploymentWorkflowId(deployment));
    try {
      const view = await client.connection.withDeadline(Date.now() + UPDATE_DEADLINE_MS, () => call(handle));
      return { accepted: true, desired: view.desired };
    } catch (err) {
      // The validator said no (already at that count, outside the bounds, being undeployed).
      if (err instanceof WorkflowUpdateFailedError) return { accepted: false, reason: err.cause?.message ?? err.message };
      if (err instanceof WorkflowNotFoundError) return { accepted: false, reason: 'the deployment workflow is not running' };
      throw err;
    }
  }
}
