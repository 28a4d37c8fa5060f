// `llmgw nodes`: every node workflow, read through its describe query.
import Table from 'cli-table3';
import { connectClient } from '../../temporal/connection.js';
import { describeNodeQuery } from '../../workflows/definitions.js';
import type { NodeView } from '../../common/node-types.js';

export async function listNodes(): Promise<NodeView[]> {
  const client = await connectClient();
  try {
    const views: NodeView[] = [];
    for await (const execution of client.workflow.list({ query: `WorkflowType = 'node' AND ExecutionStatus = 'Running'` })) {
      views.push(await client.workflow.getHandle(execution.workflowId).query(describeNodeQuery));
    }
    return views.sort((a, b) => a.nodeId.localeCompare(b.nodeId));
  } finally {
    await client.connection.close();
  }
}

export async function nodesCommand(opts: { json?: boolean }): Promise<void> {
  const views = await listNodes();
  if (opts.json) {
    console.log(JSON.stringify(views, null, 2));
    return;
  }
  if (!views.length) {
    console.log('no nodes: start an agent (`llmgw agent --gpus builtin:h100x8 --node-id sim-a`)');
    return;
  }
  const table = new Table({ head: ['node', 'state', 'GPUs free/total', 'class', 'address', 'problems'] });
  for (const view of views) {
    const inv = view.inventory;
    const problems = [...(inv?.problems ?? []), ...(inv?.gpus.filter((gpu) => gpu.problems.length).map((gpu) => `GPU ${gpu.index}: ${gpu.problems.join('; ')}`) ?? [])];
    table.push([view.nodeId, view.cordoned ? `${view.phase} (cordoned)` : view.phase, `${view.freeGpus.length}/${inv?.gpus.length ?? 0}`, inv?.gpuClass ?? '', inv?.managementAddress ?? '', problems.join('\n') || '—']);
  }
  console.log(table.toString());
}
