// The Markdown the Web UI shows as a reconcileNode run's current details: every action
// with its reason and outcome, and the node's allocations before and after.
import type { Allocation } from '../../common/node-types.js';
import type { ReconcileResult } from '../../common/reconcile-types.js';

function allocations(list: Allocation[]): string {
  return list.length ? list.map((a) => `${a.shardId} → GPUs ${a.gpuIndices.join(',')}`).join('; ') : 'none';
}

export function reconcileDetails(result: ReconcileResult, status: string): string {
  const lines = [`**reconcile ${result.nodeId}** (${result.trigger}) — ${status}`, ''];
  if (result.reportedAt) lines.push(`Agent report taken at ${result.reportedAt}.`, '');
  if (result.actions.length) {
    lines.push('| action | target | reason | outcome |', '| --- | --- | --- | --- |');
    for (const a of result.actions) {
      const target =
        a.kind === 'kill' ? `pid ${a.pid}` : a.kind === 'rebuild' ? a.replicaId : `${a.shardId} (GPUs ${a.gpuIndices.join(',')})`;
      lines.push(
        `| ${a.kind} | ${target} | ${a.reason.replace(/\|/g, '/')} | ${a.outcome.replace(/\|/g, '/')}${a.effective ? '' : ' (no change)'} |`,
      );
    }
    lines.push('');
  }
  if (result.unchanged.length) lines.push(`Unchanged: ${result.unchanged.join(', ')}`, '');
  if (result.allocationsBefore.length || result.allocationsAfter.length) {
    lines.push(
      `Allocations before: ${allocations(result.allocationsBefore)}`,
      '',
      `Allocations after: ${allocations(result.allocationsAfter)}`,
    );
  }
  return lines.join('\n');
}
