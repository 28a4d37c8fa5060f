// Every batch's view, read from the memos of its workflows through Temporal's visibility: what
// `/v1/batches` lists for a key and `llmgw batches` lists for an operator.
import type { Client } from '@temporalio/client';
import { WorkflowType } from '../common/names.js';
import { BATCH_MEMO, type BatchView } from './batch-view.js';

/** The views `keep` accepts, newest first; a batch that continued as new is listed once, by its latest run. */
export async function listBatchViews(client: Client, keep: (view: BatchView) => boolean = () => true): Promise<BatchView[]> {
  const latest = new Map<string, { startedMs: number; view: BatchView }>();
  for await (const wf of client.workflow.list({ query: `WorkflowType = '${WorkflowType.batch}'` })) {
    const memo = (await wf.memo)?.[BATCH_MEMO] as BatchView | undefined;
    const startedMs = wf.startTime.getTime();
    if (memo === undefined || !keep(memo) || (latest.get(wf.workflowId)?.startedMs ?? -1) >= startedMs) continue;
    latest.set(wf.workflowId, { startedMs, view: memo });
  }
  return [...latest.values()].map((l) => l.view).sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
}
