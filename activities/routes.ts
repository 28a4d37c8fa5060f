// The control worker's activities for the routes workflow: read every replica's route memo from
// visibility (its seed on a fresh start, and its resync), and wait until every live router has a
// replica (for rollouts, which cannot call an Update from workflow code). Control plane side.
import { Context } from '@temporalio/activity';
import type { Client, WorkflowHandle } from '@temporalio/client';
import { readReplicaRoutes } from '../router/routes-temporal.js';
import { awaitRoutedUpdate, ROUTES_WORKFLOW_ID, type AwaitRoutedResult, type RouteEntry } from '../workflows/routes/definitions.js';

const HEARTBEAT_MS = 10_000;

export function createRoutesActivities(client: Client, log: (line: string) => void) {
  return {
    async listReplicaRoutes(): Promise<RouteEntry[]> {
      return await readReplicaRoutes(client, (workflowId, message) => log(`routes: ignoring ${workflowId}: ${message}`));
    },

    /**
     * Resolves once every live router has installed a table in which the replica is routable
     * (at once when no router is live). Asks again across the routes workflow's continue-as-new.
     */
    async awaitReplicaRouted(request: { replicaId: string }): Promise<AwaitRoutedResult> {
      const handle = client.workflow.getHandle(ROUTES_WORKFLOW_ID);
      // The Update may wait as long as a router takes to call again: heartbeat meanwhile, so a
      // heartbeat timeout notices a dead worker and not a slow router.
      const ctx = Context.current();
      const heartbeat = setInterval(() => ctx.heartbeat(), HEARTBEAT_MS);
      try {
        return await untilRouted(handle, request.replicaId);
      } finally {
        clearInterval(heartbeat);
      }
    },
  };
}

async function untilRouted(handle: WorkflowHandle, replicaId: string): Promise<AwaitRoutedResult> {
  for (;;) {
    try {
      const result = await handle.executeUpdate(awaitRoutedUpdate, { args: [{ replicaId }] });
      if (result.routed) return result;
    } catch (err) {
      // Refused while the workflow continues as new: the next run answers.
      if (!(err instanceof Error) || !/continuing as new/.test(`${err.message} ${String(err.cause)}`)) throw err;
    }
    await Context.current().sleep(200);
  }
}
