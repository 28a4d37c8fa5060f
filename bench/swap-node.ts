// bench:swap's check that no GPU ever held more awake engines than fit, from the node workflows'
// histories alone: every run's completed reserve, release and awake Updates, in order, through
// common/placement/awake-audit.ts (docs/sleep.md, "Checking it afterwards").
import type { Client } from '@temporalio/client';
import { auditAwake, type CompletedUpdate } from '../common/placement/awake-audit.js';
import { decodeJson, executions, historyOf } from './fleet-measure.js';

const AUDITED = new Set(['reserve', 'release', 'awake']);

async function completedUpdates(client: Client, nodeId: string): Promise<CompletedUpdate[]> {
  const runs = (await executions(client, `WorkflowId = 'node/${nodeId}'`)).sort((a, b) => a.startTime.getTime() - b.startTime.getTime());
  const updates: CompletedUpdate[] = [];
  for (const run of runs) {
    const requests = new Map<string, { name: string; request: unknown }>();
    for (const event of await historyOf(client, run)) {
      const accepted = event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest;
      if (accepted?.meta?.updateId && AUDITED.has(accepted.input?.name ?? '')) {
        requests.set(accepted.meta.updateId, { name: accepted.input!.name!, request: decodeJson(accepted.input?.args?.payloads?.[0]) });
      }
      const completed = event.workflowExecutionUpdateCompletedEventAttributes;
      const asked = completed?.meta?.updateId ? requests.get(completed.meta.updateId) : undefined;
      if (!completed || !asked || completed.outcome?.failure) continue;
      updates.push({ ...asked, result: decodeJson(completed.outcome?.success?.payloads?.[0]), eventId: Number(event.eventId) });
    }
  }
  return updates;
}

/** Moments (Updates replayed) at which a GPU's awake shares passed 1, over every node; and the Updates read. */
export async function overCommittedMoments(
  client: Client,
  nodeIds: string[],
): Promise<{ overCommitted: number; updates: number; maxLoad: number }> {
  let overCommitted = 0;
  let updates = 0;
  let maxLoad = 0;
  for (const nodeId of nodeIds) {
    const completed = await completedUpdates(client, nodeId);
    const audit = auditAwake(completed);
    overCommitted += audit.violations.length;
    updates += completed.length;
    maxLoad = Math.max(maxLoad, audit.maxLoad);
    for (const violation of audit.violations.slice(0, 5)) console.log(`  over-committed on ${nodeId}: ${violation}`);
  }
  return { overCommitted, updates, maxLoad };
}
