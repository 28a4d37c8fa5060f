// `llmgw reconcile [node…]`: runs reconcileNode now for each node (all Ready nodes when
// none is named) and prints every action with its reason, as the Web UI shows it.
import { newTable } from './table.js';
import { CONTROL_TASK_QUEUE } from '../../common/names.js';
import type { ReconcileNodeInput, ReconcileResult } from '../../common/reconcile-types.js';
import { withClient } from './client.js';
import type { reconcileNode } from '../../workflows/reconcile/workflow.js';

export async function reconcileNow(nodeIds: string[]): Promise<ReconcileResult[]> {
  return withClient(async (client) => {
    let targets = nodeIds;
    if (!targets.length) {
      targets = [];
      for await (const execution of client.workflow.list({ query: `WorkflowType = 'node' AND ExecutionStatus = 'Running'` }))
        targets.push(execution.workflowId.replace(/^node\//, ''));
    }
    return Promise.all(
      targets.sort().map((nodeId) => {
        const input: ReconcileNodeInput = { nodeId, trigger: 'llmgw reconcile' };
        return client.workflow.execute<typeof reconcileNode>('reconcileNode', {
          workflowId: `reconcile/${nodeId}/cli-${Date.now()}`,
          taskQueue: CONTROL_TASK_QUEUE,
          args: [input],
          workflowExecutionTimeout: '5 minutes',
          staticSummary: `reconcile ${nodeId} (llmgw reconcile)`,
        });
      }),
    );
  });
}

export async function reconcileCommand(nodeIds: string[], opts: { json?: boolean }): Promise<void> {
  const results = await reconcileNow(nodeIds);
  if (opts.json) {
    console.log(JSON.stringify(results, null, 2));
    return;
  }
  if (!results.length) console.log('no nodes to reconcile: no agent has registered');
  for (const result of results) {
    if (result.skipped) {
      console.log(`${result.nodeId}: skipped: ${result.skipped}`);
      continue;
    }
    console.log(
      `${result.nodeId}: ${result.changed ? `${result.changed} change(s)` : 'nothing to change'} (report taken ${result.reportedAt})`,
    );
    if (!result.actions.length) continue;
    const table = newTable({ head: ['action', 'target', 'reason', 'outcome'], colWidths: [9, 28, 60, 30], wordWrap: true });
    for (const a of result.actions) {
      const target =
        a.kind === 'kill' ? `pid ${a.pid}` : a.kind === 'rebuild' ? a.replicaId : `${a.shardId} (GPUs ${a.gpuIndices.join(',')})`;
      table.push([a.kind, target, a.reason, `${a.outcome}${a.effective ? '' : ' (no change)'}`]);
    }
    console.log(table.toString());
  }
}
