// How reconcileNode carries out its plan: a table with one entry per kind of action (CARRY_OUT),
// and the order the kinds go in (ORDER). Adding a kind of action is its shape in
// common/reconcile-types.ts, the case that plans it in plan.ts, its entry here and its place in
// ORDER. Workflow side.
import { getExternalWorkflowHandle, log, patched } from '@temporalio/workflow';
import { create } from '@bufbuild/protobuf';
import type { AgentActivities } from '../../agent/activity-types.js';
import type { ControlActivities } from '../../activities/index.js';
import type { ReconcileAllocationsResult } from '../../common/node-types.js';
import type { ReconcileAction, ReconcileFacts, ReconcilePlan, ReconcileResult } from '../../common/reconcile-types.js';
import { KillProcessesSchema, type KillProcessesResult, type Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { StopShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { replicaClosedSignal, shardTransitionSignal, stopReplicaSignal } from '../definitions.js';
import { agentActivities, controlActivities } from '../toolkit.js';
import { isDead } from './plan.js';

/** Marks runs that tell a deployment about a replica whose workflow closed under it. */
const TELL_DEPLOYMENT_PATCH = 'tell-deployment-of-closed-replica';
/** Marks runs that skip the reconcileAllocations Update when the node already holds exactly what runs. */
const SKIP_NOOP_ALLOCATIONS_PATCH = 'skip-noop-allocations';

export function agent(nodeId: string, summary: string): AgentActivities {
  return agentActivities(nodeId, summary, {
    // An agent that is not polling has nothing to report: give up quickly, the next
    // registration or the Schedule tries again.
    scheduleToStartTimeout: '15 seconds',
    startToCloseTimeout: '90 seconds',
    // The agent heartbeats every second while it reports, kills or stops: a task handed to a
    // poller whose connection died (a host back from a partition) is retried in 10 s, not 90.
    heartbeatTimeout: '10 seconds',
    retry: { maximumAttempts: 2 },
  });
}

export function control(summary: string): ControlActivities {
  return controlActivities(summary, { startToCloseTimeout: '30 seconds' });
}

/** One run's facts and what it has learnt while carrying out the plan. */
export interface ReconcileRun {
  nodeId: string;
  /** The report was taken by this run (the agent already killed what nobody could describe). */
  fresh: boolean;
  report: Register;
  facts: ReconcileFacts;
  plan: ReconcilePlan;
  result: ReconcileResult;
  /** The one killProcesses call of a run handed a report, made for its first kill. */
  killed?: Promise<KillProcessesResult>;
  /** The node's answer to reconcileAllocations, once asked. */
  allocations?: ReconcileAllocationsResult;
}

type Kind = ReconcileAction['kind'];
type Done = { effective: boolean; outcome: string };
type CarryOut<K extends Kind> = (run: ReconcileRun, action: Extract<ReconcileAction, { kind: K }>) => Promise<Done>;

const done = (effective: boolean, outcome: string): Done => ({ effective, outcome });

const CARRY_OUT: { [K in Kind]: CarryOut<K> } = {
  // Processes nobody can describe: a fresh report's agent killed them while taking it.
  async kill(run, action) {
    if (run.fresh) {
      const killed = run.report.unidentified.find((p) => p.pid === action.pid)?.killed;
      return killed ? done(true, 'killed by the agent') : done(false, 'the agent could not kill it');
    }
    const kills = run.plan.actions.filter((a) => a.kind === 'kill');
    run.killed ??= agent(run.nodeId, `kill ${kills.length} unidentified process(es)`).killProcesses(
      create(KillProcessesSchema, { pids: kills.map((k) => k.pid), reason: 'reconciliation: nobody can describe it' }),
    );
    const { killed, alreadyGone } = await run.killed;
    if (killed.includes(action.pid)) return done(true, 'killed');
    return done(false, alreadyGone.includes(action.pid) ? 'already gone' : 'refused by the agent');
  },
  // A replica that must not restart its engine is told first.
  async stop(run, action) {
    if (action.stopReplica)
      await getExternalWorkflowHandle(action.replicaId)
        .signal(stopReplicaSignal, { reason: action.reason })
        .catch(() => undefined);
    let stopped: Done;
    try {
      const { wasRunning } = await agent(run.nodeId, `stopShard ${action.shardId}: ${action.reason}`).stopShard(
        create(StopShardSchema, {
          shardId: action.shardId,
          replicaId: action.replicaId,
          graceSeconds: 10,
          reason: `reconciliation: ${action.reason}`,
        }),
      );
      const outcome = wasRunning ? `stopped pid ${action.pid}` : run.fresh ? 'removed its record (nothing was running)' : 'already stopped';
      stopped = done(wasRunning || run.fresh, outcome);
    } catch (error) {
      stopped = done(false, `stop failed: ${String(error)}`);
    }
    // Runs recorded before this signal existed replay without it.
    if (action.tellDeployment && patched(TELL_DEPLOYMENT_PATCH)) {
      await getExternalWorkflowHandle(action.tellDeployment)
        .signal(replicaClosedSignal, {
          replicaId: action.replicaId,
          reason: `its workflow closed while shard ${action.shardId} still ran on ${run.nodeId}; reconciliation stopped it`,
        })
        .catch(() => undefined);
    }
    return stopped;
  },
  async release(run, action) {
    if (!run.allocations) return done(false, 'not carried out');
    const freed = run.allocations.released.includes(action.shardId);
    return done(freed, freed ? `GPUs ${action.gpuIndices.join(',')} freed` : 'already free');
  },
  async adopt(run, action) {
    if (run.allocations?.claimed.includes(action.shardId)) return done(true, `GPUs ${action.gpuIndices.join(',')} claimed`);
    const shard = run.report.runningShards.find((s) => s.spec?.shardId === action.shardId);
    if (!shard?.status || !isDead(shard)) return done(false, 'the node could not claim its GPUs (see the conflicts in the log)');
    // The engine died while nobody was listening: the replica restarts it.
    await getExternalWorkflowHandle(action.replicaId)
      .signal(shardTransitionSignal, shard.status)
      .catch(() => undefined);
    return done(true, 'the replica was told its engine exited');
  },
  async rebuild(run, action) {
    const rebuilt = await control(`rebuildReplica ${action.replicaId} in adopt mode`).rebuildReplica({
      action,
      drainGraceSeconds: run.facts.drainGraceSeconds,
    });
    if (!rebuilt.replicaStarted) return done(false, 'already rebuilt');
    return done(true, `replica started in adopt mode${rebuilt.deploymentStarted ? `; deployment/${action.deployment} rebuilt` : ''}`);
  },
};

/**
 * The node holds exactly what runs, and frees what nothing holds. When it already does,
 * nothing is sent: a steady node costs no Update per reconcile (runs before this patch sent one).
 */
async function matchAllocations(run: ReconcileRun): Promise<void> {
  const { facts, plan, result } = run;
  const held = facts.node?.allocations ?? [];
  const alreadyHeld = (claim: (typeof plan.claims)[number]): boolean =>
    held.some(
      (a) =>
        a.shardId === claim.shardId &&
        a.gpuIndices.length === claim.gpuIndices.length &&
        a.gpuIndices.every((i) => claim.gpuIndices.includes(i)),
    );
  const nothingToChange = Boolean(facts.node) && plan.releases.length === 0 && plan.claims.every(alreadyHeld);
  if (nothingToChange && patched(SKIP_NOOP_ALLOCATIONS_PATCH)) {
    result.allocationsAfter = held;
    return;
  }
  if (!facts.node) return;
  run.allocations = await control(
    `reconcileAllocations ${run.nodeId}: ${plan.claims.length} claim(s), ${plan.releases.length} release(s)`,
  ).reconcileAllocations({ nodeId: run.nodeId, claims: plan.claims, releases: plan.releases });
  for (const conflict of run.allocations.conflicts) log.warn(conflict);
  result.allocationsAfter = run.allocations.allocations;
  const planned = (id: string): boolean => plan.actions.some((a) => a.kind === 'adopt' && a.shardId === id);
  result.changed += run.allocations.claimed.filter((id) => !planned(id)).length;
}

/**
 * The order actions are carried out in, kind by kind (in plan order within a group): what nobody
 * can describe is killed and what must not run is stopped before the node's allocations are made
 * to match what runs, so the GPUs they held are freed; replicas are then told or rebuilt around
 * the GPUs just claimed for them.
 */
const ORDER: (Kind[] | 'allocations')[] = [['kill'], ['stop'], 'allocations', ['release', 'adopt', 'rebuild']];

/** Carries out the plan in ORDER; returns each action with its outcome, in plan order. */
export async function carryOut(run: ReconcileRun): Promise<ReconcileResult['actions']> {
  const outcomes = new Map<ReconcileAction, Done>();
  for (const group of ORDER) {
    if (group === 'allocations') await matchAllocations(run);
    else
      for (const action of run.plan.actions.filter((a) => group.includes(a.kind)))
        outcomes.set(action, await (CARRY_OUT[action.kind] as CarryOut<Kind>)(run, action));
  }
  return run.plan.actions.map((action) => ({ ...action, ...(outcomes.get(action) ?? done(false, 'not carried out')) }));
}
