// Which hosts a prefetch goes to when the operator names none: the Ready, uncordoned nodes of
// a GPU class, from the node workflows' search attributes (one visibility call). Control side.
import type { Client } from '@temporalio/client';
import { queryLiteral } from '../common/safe-name.js';

export function createWeightsNodeActivities(client: Client) {
  return {
    async readyNodesOfClass(request: { gpuClass: string }): Promise<string[]> {
      const nodes: string[] = [];
      const query = `WorkflowType = 'node' AND ExecutionStatus = 'Running' AND LlmgwState = 'Ready' AND LlmgwGpuClass = ${queryLiteral('gpuClass', request.gpuClass)}`;
      for await (const execution of client.workflow.list({ query })) nodes.push(execution.workflowId.replace(/^node\//, ''));
      return nodes.sort();
    },
  };
}
