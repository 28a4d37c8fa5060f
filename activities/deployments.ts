// What a deployment asks of visibility: the first replica sequence number no earlier
// incarnation of its name used, and which of its replica workflows still run. Control side.
import { queryLiteral } from '../common/safe-name.js';
import type { Client } from '@temporalio/client';
import { parseReplicaWorkflowId } from '../common/names.js';

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
  };
}
