// The `reconcileNode` workflow (reconcile/<nodeId>/…): makes the control plane agree with
// what one agent really runs. Temporal remembers intent; only the agent knows what is
// running. Started by the node workflow on every registration and by the node's
// Schedule every few minutes. Each run asks the agent for a fresh report (which kills
// what the agent cannot identify), asks Temporal and the catalog about every replica the
// report names, plans (plan.ts), acts, and returns and shows every action with its reason.
import {
  ActivityFailure,
  getExternalWorkflowHandle,
  log,
  patched,
  setWorkflowOptions,
  proxyActivities,
  setCurrentDetails,
  TimeoutFailure,
  workflowInfo,
} from '@temporalio/workflow';
import { create } from '@bufbuild/protobuf';
import type { AgentActivities } from '../../agent/activity-types.js';
import type { ControlActivities } from '../../activities/index.js';
import { agentTaskQueue } from '../../common/names.js';
import { KillProcessesSchema, type Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { StopShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { ActionOutcome, ReconcileAction, ReconcileNodeInput, ReconcileResult } from '../../common/reconcile-types.js';
import { replicaClosedSignal, shardTransitionSignal, stopReplicaSignal } from '../definitions.js';
import { catalogKey, isDead, planReconcile } from './plan.js';
import { reconcileDetails } from './details.js';
import { controlActivities } from '../toolkit.js';

/** Marks runs that tell a deployment about a replica whose workflow closed under it. */
const TELL_DEPLOYMENT_PATCH = 'tell-deployment-of-closed-replica';
/** Marks runs that skip the reconcileAllocations Update when the node already holds exactly what runs. */
const SKIP_NOOP_ALLOCATIONS_PATCH = 'skip-noop-allocations';

function agent(nodeId: string, summary: string): AgentActivities {
  return proxyActivities<AgentActivities>({
    taskQueue: agentTaskQueue(nodeId),
    // An agent that is not polling has nothing to report: give up quickly, the next
    // registration or the Schedule tries again.
    scheduleToStartTimeout: '15 seconds',
    startToCloseTimeout: '90 seconds',
    // The agent heartbeats every second while it reports, kills or stops: a task handed to a
    // poller whose connection died (a host back from a partition) is retried in 10 s, not 90.
    heartbeatTimeout: '10 seconds',
    retry: { maximumAttempts: 2 },
    summary,
  });
}

function control(summary: string): ControlActivities {
  return controlActivities(summary, { startToCloseTimeout: '30 seconds' });
}

export async function reconcileNode(input: ReconcileNodeInput): Promise<ReconcileResult> {
  const { nodeId } = input;
  const trigger = input.trigger ?? 'manual';
  const fresh = input.report === undefined;
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
  let report: Register;
  try {
    report =
      input.report ??
      (input.dryRun
        ? await agent(nodeId, `describe ${nodeId} (dry run: nothing is killed)`).describe()
        : await agent(nodeId, `survey ${nodeId}: running shards, and kill what nobody can describe`).survey());
  } catch (error) {
    const cause = error instanceof ActivityFailure ? error.cause : error;
    result.skipped =
      cause instanceof TimeoutFailure
        ? `the agent of ${nodeId} did not answer (${cause.timeoutType}); nothing was changed`
        : `the agent's report failed: ${String(cause)}`;
    show(result.skipped);
    log.warn(result.skipped);
    return result;
  }
  result.reportedAt = report.reportedAt;

  const shards = report.runningShards.filter((s) => s.spec);
  const profiles = [
    ...new Map(
      shards
        .filter((s) => s.spec!.profile)
        .map((s) => [
          catalogKey(s.spec!.profile!.model, s.spec!.profile!.name),
          { model: s.spec!.profile!.model, profile: s.spec!.profile!.name },
        ]),
    ).values(),
  ];
  show(`checking ${shards.length} reported shard(s) against Temporal and the catalog`);
  const facts = await control(`inspectNode ${nodeId}: ${shards.length} shard(s)`).inspectNode({
    nodeId,
    replicaIds: [...new Set(shards.map((s) => s.spec!.replicaId))],
    profiles,
  });
  result.allocationsBefore = facts.node?.allocations ?? [];
  const plan = planReconcile(report, facts);
  result.unchanged = plan.unchanged;
  const outcomes = new Map<ReconcileAction, ActionOutcome>();
  const record = (action: ReconcileAction, effective: boolean, outcome: string): void =>
    void outcomes.set(action, { ...action, effective, outcome });
  if (input.dryRun) {
    result.dryRun = true;
    result.actions = plan.actions.map((action) => ({ ...action, effective: false, outcome: 'dry run: not carried out' }));
    show(`dry run: ${plan.actions.length} action(s) planned, none carried out`);
    return result;
  }
  show(`carrying out ${plan.actions.length} action(s)`);

  // Processes nobody can describe: the agent killed them while taking the report.
  const kills = plan.actions.filter((a): a is Extract<ReconcileAction, { kind: 'kill' }> => a.kind === 'kill');
  if (kills.length && !fresh) {
    const killed = await agent(nodeId, `kill ${kills.length} unidentified process(es)`).killProcesses(
      create(KillProcessesSchema, { pids: kills.map((k) => k.pid), reason: 'reconciliation: nobody can describe it' }),
    );
    for (const k of kills)
      record(
        k,
        killed.killed.includes(k.pid),
        killed.killed.includes(k.pid) ? 'killed' : killed.alreadyGone.includes(k.pid) ? 'already gone' : 'refused by the agent',
      );
  } else {
    const byPid = new Map(report.unidentified.map((p) => [p.pid, p]));
    for (const k of kills)
      record(k, Boolean(byPid.get(k.pid)?.killed), byPid.get(k.pid)?.killed ? 'killed by the agent' : 'the agent could not kill it');
  }

  // Stops: a replica that must not restart its engine is told first.
  for (const action of plan.actions) {
    if (action.kind !== 'stop') continue;
    if (action.stopReplica)
      await getExternalWorkflowHandle(action.replicaId)
        .signal(stopReplicaSignal, { reason: action.reason })
        .catch(() => undefined);
    try {
      const stopped = await agent(nodeId, `stopShard ${action.shardId}: ${action.reason}`).stopShard(
        create(StopShardSchema, {
          shardId: action.shardId,
          replicaId: action.replicaId,
          graceSeconds: 10,
          reason: `reconciliation: ${action.reason}`,
        }),
      );
      record(
        action,
        stopped.wasRunning || fresh,
        stopped.wasRunning ? `stopped pid ${action.pid}` : fresh ? 'removed its record (nothing was running)' : 'already stopped',
      );
    } catch (error) {
      record(action, false, `stop failed: ${String(error)}`);
    }
    // Runs recorded before this signal existed replay without it.
    if (action.tellDeployment && patched(TELL_DEPLOYMENT_PATCH)) {
      await getExternalWorkflowHandle(action.tellDeployment)
        .signal(replicaClosedSignal, {
          replicaId: action.replicaId,
          reason: `its workflow closed while shard ${action.shardId} still ran on ${nodeId}; reconciliation stopped it`,
        })
        .catch(() => undefined);
    }
  }

  // The node holds exactly what runs, and frees what nothing holds. When it already does,
  // nothing is sent: a steady node costs no Update per reconcile (runs before this patch sent one).
  const alreadyHeld = (claim: (typeof plan.claims)[number]): boolean =>
    (facts.node?.allocations ?? []).some(
      (a) =>
        a.shardId === claim.shardId &&
        a.gpuIndices.length === claim.gpuIndices.length &&
        a.gpuIndices.every((i) => claim.gpuIndices.includes(i)),
    );
  const nothingToChange = Boolean(facts.node) && plan.releases.length === 0 && plan.claims.every(alreadyHeld);
  if (nothingToChange && patched(SKIP_NOOP_ALLOCATIONS_PATCH)) {
    result.allocationsAfter = facts.node!.allocations;
  } else if (facts.node) {
    const changed = await control(
      `reconcileAllocations ${nodeId}: ${plan.claims.length} claim(s), ${plan.releases.length} release(s)`,
    ).reconcileAllocations({ nodeId, claims: plan.claims, releases: plan.releases });
    for (const action of plan.actions) {
      if (action.kind === 'release')
        record(
          action,
          changed.released.includes(action.shardId),
          changed.released.includes(action.shardId) ? `GPUs ${action.gpuIndices.join(',')} freed` : 'already free',
        );
      if (action.kind === 'adopt' && changed.claimed.includes(action.shardId))
        record(action, true, `GPUs ${action.gpuIndices.join(',')} claimed`);
    }
    for (const conflict of changed.conflicts) log.warn(conflict);
    result.allocationsAfter = changed.allocations;
    const claimedUnplanned = changed.claimed.filter((id) => !plan.actions.some((a) => a.kind === 'adopt' && a.shardId === id));
    result.changed += claimedUnplanned.length;
  }

  for (const action of plan.actions) {
    if (action.kind === 'rebuild') {
      const rebuilt = await control(`rebuildReplica ${action.replicaId} in adopt mode`).rebuildReplica({
        action,
        drainGraceSeconds: facts.drainGraceSeconds,
      });
      record(
        action,
        rebuilt.replicaStarted,
        rebuilt.replicaStarted
          ? `replica started in adopt mode${rebuilt.deploymentStarted ? `; deployment/${action.deployment} rebuilt` : ''}`
          : 'already rebuilt',
      );
    }
    if (action.kind === 'adopt' && !outcomes.has(action)) {
      const shard = report.runningShards.find((s) => s.spec?.shardId === action.shardId);
      if (shard?.status && isDead(shard)) {
        // The engine died while nobody was listening: the replica restarts it.
        await getExternalWorkflowHandle(action.replicaId)
          .signal(shardTransitionSignal, shard.status)
          .catch(() => undefined);
        record(action, true, 'the replica was told its engine exited');
      } else {
        record(action, false, 'the node could not claim its GPUs (see the conflicts in the log)');
      }
    }
  }

  result.actions = plan.actions.map((action) => outcomes.get(action) ?? { ...action, effective: false, outcome: 'not carried out' });
  result.changed += result.actions.filter((a) => a.effective).length;
  const summary = result.changed ? `${result.changed} change(s)` : 'nothing to change';
  show(summary);
  log.info(`reconciled ${nodeId} (${trigger}, run ${workflowInfo().runId}): ${summary}`, {
    actions: result.actions.map((a) => `${a.kind} ${'shardId' in a ? a.shardId : 'pid' in a ? a.pid : ''}: ${a.reason} → ${a.outcome}`),
  });
  return result;
}

// A short run that replays any build's history (its changes are patched): it takes the Current
// build at its next task rather than staying pinned like the long-running workflows.
setWorkflowOptions({ versioningBehavior: 'AUTO_UPGRADE' }, reconcileNode);
