// The autoscaler's calls to Temporal: the `autoscale` Update (a new desired count, with its
// reason and signals) and `wake` (requests wait for a deployment at zero), on deployment/<name>;
// `sleepReplica` on an idle replica's workflow (the ladder, idle-sleep.ts). Each is refused by its
// validator when it changes nothing, and a refused Update is not recorded: several routers
// deciding the same count, waking or putting one replica to sleep at once, cost no events.
// Router side; the primary of a cluster (or a single router) makes these calls.
import { ApplicationFailure } from '@temporalio/common';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, WorkflowUpdateStage, type Client } from '@temporalio/client';
import { deploymentWorkflowId } from '../../common/names.js';
import type { AutoscaleDecision } from '../../common/replica-types.js';
import type { SleepRequest } from '../../common/sleep-types.js';
import { autoscaleUpdate, sleepReplicaUpdate, wakeUpdate } from '../../workflows/definitions.js';

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

/** What came of a sleepReplica Update: the replica's validator refused it (and why), or it is asleep. */
export type SleepOutcome = { asleep: true } | { asleep: false; refused: string };

/** Puts a replica to sleep. Throws when Temporal cannot be reached or the sleep itself failed. */
export type ReplicaSleeper = (replicaId: string, request: SleepRequest) => Promise<SleepOutcome>;

/**
 * A sleep takes the routers' confirmation and each engine's sleep (one finishing what it runs):
 * seconds, or as long as the longest request in flight. Past this the router stops waiting; the
 * sleep itself goes on in the replica.
 */
const SLEEP_DEADLINE_MS = 120_000;

/** The failure type of a sleep the replica accepted and could not carry out (workflows/replica/sleep.ts). */
const SLEEP_FAILED = 'SleepFailed';

/**
 * The `sleepReplica` Update through Temporal: accepted within the Update deadline (a refusal by
 * the validator comes back then), then awaited. A refusal (asleep already, woken too recently, not
 * Ready) is told from a sleep that failed by the failure's type.
 */
export function temporalReplicaSleeper(client: () => Promise<Client>): ReplicaSleeper {
  return async (replicaId, request) => {
    const c = await client();
    const handle = c.workflow.getHandle(replicaId);
    try {
      const update = await c.connection.withDeadline(Date.now() + UPDATE_DEADLINE_MS, () =>
        handle.startUpdate(sleepReplicaUpdate, { args: [request], waitForStage: WorkflowUpdateStage.ACCEPTED }),
      );
      await c.connection.withDeadline(Date.now() + SLEEP_DEADLINE_MS, () => update.result());
      return { asleep: true };
    } catch (err) {
      if (err instanceof WorkflowUpdateFailedError && !(err.cause instanceof ApplicationFailure && err.cause.type === SLEEP_FAILED))
        return { asleep: false, refused: err.cause?.message ?? err.message };
      if (err instanceof WorkflowNotFoundError) return { asleep: false, refused: 'the replica workflow is not running' };
      throw err;
    }
  };
}
