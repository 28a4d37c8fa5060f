// The `reconcileNode` workflow (reconcile/<nodeId>/…): makes the control plane agree with
// what one agent really runs. Temporal remembers intent; only the agent knows what is
// running. Started by the node workflow on every registration and by the node's reconcile
// Schedule (every --reconcile-every-seconds of its agent, 3,600 by default). Each run asks the
// agent for a fresh report (which kills what the agent cannot identify), asks Temporal and the
// catalog about every replica the report names, plans (plan.ts), carries the plan out kind by
// kind (actions.ts), and returns and shows every action with its reason.
import { ActivityFailure, log, setCurrentDetails, setWorkflowOptions, TimeoutFailure, workflowInfo } from '@temporalio/workflow';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import type { ReconcileNodeInput, ReconcileResult } from '../../common/reconcile-types.js';
import { agent, carryOut, control } from './actions.js';
import { reconcileDetails } from './details.js';
import { catalogKey, planReconcile } from './plan.js';

export async function reconcileNode(input: ReconcileNodeInput): Promise<ReconcileResult> {
  const { nodeId } = input;
  const trigger = input.trigger ?? 'manual';
  const result: ReconcileResult = {
    nodeId,
    trigger,
    reportedAt: '',
    actions: [],
    changed: 0,
    unchanged: [],
    allocationsBefore: [],
    allocationsAfter: [],
  };
  const show = (status: string): void => setCurrentDetails(reconcileDetails(result, status));

  show('asking the agent for a fresh report');
  const report = await takeReport(input).catch((error: unknown) => {
    const cause = error instanceof ActivityFailure ? error.cause : error;
    result.skipped =
      cause instanceof TimeoutFailure
        ? `the agent of ${nodeId} did not answer (${cause.timeoutType}); nothing was changed`
        : `the agent's report failed: ${String(cause)}`;
    show(result.skipped);
    log.warn(result.skipped);
    return undefined;
  });
  if (!report) return result;
  result.reportedAt = report.reportedAt;

  const shards = report.runningShards.filter((s) => s.spec);
  const profiles = new Map(
    shards.flatMap(({ spec }) => (spec!.profile ? [spec!.profile] : [])).map((p) => [catalogKey(p.model, p.name), p]),
  );
  show(`checking ${shards.length} reported shard(s) against Temporal and the catalog`);
  // The report goes along so the control worker can check it is the agent's own (signed for this
  // run): anyone may start this workflow with a report, or answer the survey in the agent's place.
  const facts = await control(`inspectNode ${nodeId}: ${shards.length} shard(s)`).inspectNode({
    nodeId,
    replicaIds: [...new Set(shards.map((s) => s.spec!.replicaId))],
    profiles: [...profiles.values()].map((p) => ({ model: p.model, profile: p.name })),
    report,
  });
  result.allocationsBefore = facts.node?.allocations ?? [];
  if (facts.reportRefused) {
    result.skipped = `not acted on: ${facts.reportRefused}`;
    show(result.skipped);
    log.warn(result.skipped);
    return result;
  }
  const plan = planReconcile(report, facts);
  result.unchanged = plan.unchanged;
  if (input.dryRun) {
    result.dryRun = true;
    result.actions = plan.actions.map((action) => ({ ...action, effective: false, outcome: 'dry run: not carried out' }));
    show(`dry run: ${plan.actions.length} action(s) planned, none carried out`);
    return result;
  }
  show(`carrying out ${plan.actions.length} action(s)`);
  result.actions = await carryOut({ nodeId, fresh: input.report === undefined, report, facts, plan, result });

  result.changed += result.actions.filter((a) => a.effective).length;
  const summary = result.changed ? `${result.changed} change(s)` : 'nothing to change';
  show(summary);
  log.info(`reconciled ${nodeId} (${trigger}, run ${workflowInfo().runId}): ${summary}`, {
    actions: result.actions.map((a) => `${a.kind} ${'shardId' in a ? a.shardId : 'pid' in a ? a.pid : ''}: ${a.reason} → ${a.outcome}`),
  });
  return result;
}

/** The report handed in, or a fresh one: a survey kills what nobody can describe; a dry run's describe kills nothing. */
async function takeReport(input: ReconcileNodeInput): Promise<Register> {
  if (input.report) return input.report;
  if (input.dryRun) return agent(input.nodeId, `describe ${input.nodeId} (dry run: nothing is killed)`).describe();
  return agent(input.nodeId, `survey ${input.nodeId}: running shards, and kill what nobody can describe`).survey();
}

// A short run that replays any build's history (its changes are patched): it takes the Current
// build at its next task rather than staying pinned like the long-running workflows.
setWorkflowOptions({ versioningBehavior: 'AUTO_UPGRADE' }, reconcileNode);
