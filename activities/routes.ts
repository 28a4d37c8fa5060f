// The control worker's activities for the routes workflow: read every replica's route memo from
// visibility (its seed on a fresh start, and its resync), and wait until every live router has a
// replica in its table, or has dropped it (rollouts count a new replica only once routed; drains
// stop an engine only once no router sends it anything new). Workflows cannot call an Update,
// hence an activity. Control plane side.
import { Context } from '@temporalio/activity';
import { WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import { readReplicaRoutes } from '../router/routes/visibility.js';
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
        const result = await untilRouted(
          handle,
          request.replicaId,
          request.routed ?? true,
          (ms) => Context.current().sleep(ms),
          (reason) => log(`routes: awaitRouted ${request.replicaId} asked again after: ${reason}`),
        );
        const doing = request.routed === false ? 'dropped it' : 'route to it';
        return { ...result, summary: result.routers ? `${result.routers} router(s) ${doing}` : 'no router is running' };
      } finally {
        clearInterval(heartbeat);
      }
    },
  };
}

/**
 * awaitRouted until it answers for this run (the CLI's `deploy --wait` asks it too). Only a
 * missing workflow or a request the validator calls malformed ends the wait: any other refusal
 * is the routes workflow between runs, and the next run answers. Seen on a loaded CI host: the
 * server failed an accepted call with "Workflow Update failed" when the run it was accepted by
 * ended under it (continue-as-new, or a workflow task lost to a timeout). The caller bounds the
 * wait (the activity's timeout, the CLI's deadline).
 */
export async function untilRouted(
  handle: WorkflowHandle,
  replicaId: string,
  routed: boolean,
  pause: (ms: number) => Promise<void>,
  onRetry: (reason: string) => void = () => undefined,
): Promise<AwaitRoutedResult> {
  for (let attempt = 0; ; attempt++) {
    try {
      const result = await handle.executeUpdate(awaitRoutedUpdate, { args: [{ replicaId, routed }] });
      if (result.routed) return result;
    } catch (err) {
      if (!(err instanceof Error) || err instanceof WorkflowNotFoundError || /needs a replicaId/.test(`${String(err.cause)}`)) throw err;
      const reason = err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message;
      if (!/continuing as new/.test(reason)) onRetry(reason);
    }
    await pause(Math.min(200 * 2 ** Math.min(attempt, 3), 1_000));
  }
}
