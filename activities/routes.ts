// Whether the routers route to a replica yet: a rollout counts a new replica only once they
// do. Asks the `routes` workflow (workflows/routes/), which knows which route-table version
// each live router has installed. Control side.
import { WorkflowNotFoundError, type Client } from '@temporalio/client';

/** The routes workflow's id and its Update (defined with the workflow; named here to keep this side light). */
const ROUTES_WORKFLOW_ID = 'routes';
const AWAIT_ROUTED_UPDATE = 'awaitRouted';
/** Routers that learn routes by polling visibility pick a change up within this. */
const VISIBILITY_POLL_SLACK_MS = 1_500;

export function createRoutesActivities(client: Client) {
  return {
    async awaitRouted(request: { replicaId: string; routed?: boolean }): Promise<{ routers: number; summary: string }> {
      try {
        const result = await client.workflow
          .getHandle(ROUTES_WORKFLOW_ID)
          .executeUpdate<{ routers: number }, [{ replicaId: string; routed: boolean }]>(AWAIT_ROUTED_UPDATE, {
            args: [{ replicaId: request.replicaId, routed: request.routed ?? true }],
          });
        return { routers: result.routers, summary: result.routers ? `${result.routers} router(s) confirmed` : 'no router is running' };
      } catch (error) {
        if (!(error instanceof WorkflowNotFoundError) && !/not found|no registered handler|unknown update/i.test(String(error)))
          throw error;
        // No routes workflow: routers read visibility every 500 ms; give them that long.
        await new Promise((resolve) => setTimeout(resolve, VISIBILITY_POLL_SLACK_MS));
        return { routers: 0, summary: `no routes workflow; waited ${VISIBILITY_POLL_SLACK_MS} ms for routers polling visibility` };
      }
    },
  };
}
