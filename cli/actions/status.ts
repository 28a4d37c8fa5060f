// `llmgw status [NAME]`: one deployment with its replicas, or every running deployment in a
// table. Through Temporal (the deployModel workflow's queries). Operator side.
import { WorkflowNotFoundError } from '@temporalio/client';
import { printList } from './table.js';
import { adaptersByReplica } from './adapters-view.js';
import { withClient } from './client.js';
import { CliError } from '../errors.js';
import { deploymentWorkflowId } from '../../common/names.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { print, readStatus } from './deployment-view.js';

export async function statusCommand(name: string | undefined, opts: { json?: boolean }): Promise<void> {
  await withClient(async (client) => {
    if (name) {
      const status = await readStatus(client.workflow.getHandle(deploymentWorkflowId(name))).catch((error: unknown) => {
        if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name} (\`llmgw status\` lists them)`);
        throw error;
      });
      if (!status) throw new CliError(`deployment ${name} is still validating`);
      print(status, opts.json, await adaptersByReplica(status));
      return;
    }
    const views: DeploymentView[] = [];
    for await (const execution of client.workflow.list({ query: `WorkflowType = 'deployModel' AND ExecutionStatus = 'Running'` })) {
      const view = await readStatus(client.workflow.getHandle(execution.workflowId)).catch(() => undefined);
      if (view) views.push(view);
    }
    printList(views, {
      json: opts.json,
      empty: 'no deployments (`llmgw deploy demo --replicas 2`)',
      head: ['deployment', 'model', 'profile', 'revision', 'state', 'ready', 'reason'],
      order: (a, b) => a.name.localeCompare(b.name),
      row: (v) => [
        v.name,
        v.model,
        v.profile,
        `${v.revision ?? '—'}${v.catalogRevision ? ` (catalog: ${v.catalogRevision})` : ''}`,
        v.phase,
        `${v.ready}/${v.desired}`,
        v.reason || '—',
      ],
    });
  });
}
