// What a deployment asks of visibility: the first replica sequence number no earlier
// incarnation of its name used, and which of its replica workflows still run. And what a replica
// asleep too long asks of its deployment: one replica fewer. Control side.
import { queryLiteral } from '../common/safe-name.js';
import type { Client } from '@temporalio/client';
import { deploymentWorkflowId, parseReplicaWorkflowId } from '../common/names.js';
import { autoscaleUpdate, deploymentStatusQuery } from '../workflows/definitions.js';

export function createDeploymentActivities(client: Client) {
  return {
    /**
     * One above the highest seq any replica of this deployment name ever had (open or closed,
     * as far as the namespace's retention reaches), so that undeploy then deploy of one name
     * never reuses a workflow id, shard id, spec file or log file of an earlier incarnation.
     */
    async nextReplicaSeq(request: { deployment: string }): Promise<number> {
      let highest = 0;
      const deployment = queryLiteral('deployment', request.deployment);
      const query = `WorkflowType = 'replica' AND LlmgwDeployment = ${deployment}`;
      for await (const execution of client.workflow.list({ query })) {
        const parsed = parseReplicaWorkflowId(execution.workflowId);
        if (parsed?.deployment === request.deployment) highest = Math.max(highest, parsed.seq);
      }
      // A replica whose first task never ran has no LlmgwDeployment yet; its id still counts.
      // request.deployment passed queryLiteral above, so it cannot close the quote.
      const byId = `WorkflowType = 'replica' AND WorkflowId STARTS_WITH 'replica/${request.deployment}/'`;
      try {
        for await (const execution of client.workflow.list({ query: byId })) {
          const parsed = parseReplicaWorkflowId(execution.workflowId);
          if (parsed?.deployment === request.deployment) highest = Math.max(highest, parsed.seq);
        }
      } catch {
        // A visibility store without STARTS_WITH: the attribute query above is what there is.
      }
      return highest + 1;
    },

    /** Which of these replica workflows are still running (the rest ended without telling). */
    async runningReplicas(request: { replicaIds: string[] }): Promise<string[]> {
      const running: string[] = [];
      for (const replicaId of request.replicaIds) {
        const description = await client.workflow
          .getHandle(replicaId)
          .describe()
          .catch(() => undefined);
        if (description?.status.name === 'RUNNING') running.push(replicaId);
      }
      return running;
    },

    /**
     * A replica asleep for its profile's stopAfterSeconds: the deployment's autoscale Update for
     * one replica fewer, so it stops one (the one asleep longest) rather than replace it. Through
     * an activity, since workflow code cannot call an Update. A deployment that is not autoscaled,
     * or is at its minimum, keeps its count: the answer says why.
     */
    async askToStopSleeper(request: {
      deployment: string;
      replicaId: string;
      asleepSeconds: number;
    }): Promise<{ asked: boolean; why: string }> {
      const handle = client.workflow.getHandle(deploymentWorkflowId(request.deployment));
      const view = await handle.query(deploymentStatusQuery);
      if (!view.autoscale)
        return { asked: false, why: `deployment ${request.deployment} is not autoscaled: it keeps its ${view.desired} replica(s)` };
      if (view.desired - 1 < view.autoscale.min)
        return { asked: false, why: `deployment ${request.deployment} is at its minimum of ${view.autoscale.min}` };
      try {
        await handle.executeUpdate(autoscaleUpdate, {
          args: [
            {
              desired: view.desired - 1,
              reason: `${request.replicaId} asleep ${request.asleepSeconds} s (stopAfterSeconds)`,
              by: request.replicaId,
            },
          ],
        });
        return { asked: true, why: '' };
      } catch (error) {
        // An Update's refusal arrives wrapped; its cause says why (at its minimum, already there).
        const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
        return { asked: false, why: cause instanceof Error ? cause.message : String(cause) };
      }
    },
  };
}
