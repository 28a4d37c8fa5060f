// The control worker's activities for the routes workflow: read every replica's route memo from
// visibility (its seed on a fresh start, and its resync), and wait until every live router has a
// replica in its table, or has dropped it (rollouts count a new replica only once routed; drains
// stop an engine only once no router sends it anything new). Workflows cannot call an Update,
// hence an activity. Control plane side.
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
     * (routed, the default) or is not (routed: false); at once when no router is live. Asks
     * again across the routes workflow's continue-as-new.
     */
    async awaitReplicaRouted(request: { replicaId: string; routed?: boolean }): Promise<AwaitRoutedResult & { summary: string }> {
      const handle = client.workflow.getHandle(ROUTES_WORKFLOW_ID);
      // The Update may wait as long as a router takes to call again: heartbeat meanwhile, so a
      // heartbeat timeout notices a dead worker and not a slow router.
      const ctx = Context.current();
      const heartbeat = setInterval(() => ctx.heartbeat(), HEARTBEAT_MS);
      try {
        const result = await untilRouted(handle, request.replicaId, request.routed ?? true, (ms) => Context.current().sleep(ms));
        const doing = request.routed === false ? 'dropped it' : 'route to it';
        return { ...result, summary: result.routers ? `${result.routers} router(s) ${doing}` : 'no router is running' };
      } finally {
        clearInterval(heartbeat);
      }
    },
  };
}

/** awaitRouted until it answers for this run (the CLI's `deploy --wait` asks it too). */
export async function untilRouted(
  handle: WorkflowHandle,
  replicaId: string,
  routed: boolean,
  pause: (ms: number) => Promise<void>,
): Promise<AwaitRoutedResult> {
  for (;;) {
    try {
      const result = await handle.executeUpdate(awaitRoutedUpdate, { args: [{ replicaId, routed }] });
      if (result.routed) return result;
    } catch (err) {
      // Refused while the workflow continues as new: the next run answers.
      if (!(err instanceof Error) || !/continuing as new/.test(`${err.message} ${String(err.cause)}`)) throw err;
    }
    await pause(200);
  }
}
