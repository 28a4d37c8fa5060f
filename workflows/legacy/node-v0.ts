// FROZEN: the node workflow as it was before Worker Versioning (commit 2d2f513), kept so that
// runs started by that release replay exactly. Do not change what it does; see docs/upgrades.md.
import {
  ActivityCancellationType,
  ActivityFailure,
  allHandlersFinished,
  CancellationScope,
  condition,
  ChildWorkflowCancellationType,
  continueAsNew,
  executeChild,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  ParentClosePolicy,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { AgentActivities } from '../../agent/activity-types.js';
import type { ControlActivities } from '../../activities/index.js';
import { agentTaskQueue } from '../../common/names.js';
import { SA } from '../../common/search-attributes.js';
import type { NodeStatusSignal } from '../../common/node-types.js';
import {
  agentStoppingSignal,
  capacityChangedSignal,
  claimUpdate,
  cordonUpdate,
  describeNodeQuery,
  nodeStatusSignal,
  reconcileAllocationsUpdate,
  registerSignal,
  releaseUpdate,
  reserveUpdate,
  uncordonUpdate,
} from '../definitions.js';
import {
  applyRegister,
  claim,
  freeGpus,
  initialNodeState,
  nodeDetails,
  reconcileAllocations,
  release,
  reserve,
  viewOf,
  type NodeState,
} from './node-state-v0.js';
import { prepareUpgradeSignal } from '../upgrade.js';
import type { reconcileNode } from '../reconcile/workflow.js';

export interface NodeWorkflowInput {
  nodeId: string;
  /** A dead agent shows as NotReady within this (plus Temporal's timer slack). */
  presenceHeartbeatSeconds?: number;
  /** NotReady for longer than this → Lost: replicas are told and the GPUs released. */
  lostGraceSeconds?: number;
  /** The node's reconcile Schedule runs this often (0: no Schedule; reconcile on registration only). */
  reconcileEverySeconds?: number;
  /** Reconciliation only shows what it would do. */
  reconcileDryRun?: boolean;
  /** State carried over continue-as-new. */
  carried?: NodeState;
}

const HISTORY_LIMIT = 4_000;

export async function nodeV0(input: NodeWorkflowInput): Promise<void> {
  const heartbeatSeconds = input.presenceHeartbeatSeconds ?? 10;
  const lostGraceMs = (input.lostGraceSeconds ?? 60) * 1000;
  const state: NodeState = input.carried ?? initialNodeState(input.nodeId);
  state.released ??= [];
  let registerSeq = 0;
  let reconcileWanted = false;

  const now = (): string => new Date().toISOString();
  const publish = (): void => {
    upsertSearchAttributes([
      { key: SA.state, value: state.cordoned ? 'Cordoned' : state.phase },
      { key: SA.freeGpus, value: freeGpus(state).length },
      { key: SA.gpuClass, value: state.inventory?.gpuClass || 'none' },
      { key: SA.nodes, value: [state.nodeId] },
    ]);
    setCurrentDetails(nodeDetails(state));
  };
  const wakeWaiters = (): void => {
    const waiters = state.waiters;
    state.waiters = [];
    for (const id of waiters) void signalQuietly(id, capacityChangedSignal.name, { nodeId: state.nodeId });
  };
  const tellReplicas = (): void => {
    const status: NodeStatusSignal = { nodeId: state.nodeId, phase: state.phase, reason: state.reason, at: now() };
    for (const replicaId of new Set(state.allocations.map((allocation) => allocation.replicaId))) {
      void signalQuietly(replicaId, nodeStatusSignal.name, status);
    }
  };
  const markNotReady = (reason: string): void => {
    if (state.phase === 'NotReady' || state.phase === 'Lost') return;
    const wasReady = state.phase === 'Ready';
    state.phase = 'NotReady';
    state.reason = reason;
    state.notReadySince = now();
    log.warn('node not ready', { nodeId: state.nodeId, reason });
    publish();
    if (wasReady) tellReplicas();
  };

  setHandler(registerSignal, (register) => {
    const wasReady = state.phase === 'Ready';
    const notes = applyRegister(state, register, now());
    for (const note of notes) log.info(note, { nodeId: state.nodeId });
    registerSeq++;
    reconcileWanted = true;
    publish();
    wakeWaiters();
    if (!wasReady) tellReplicas();
  });
  setHandler(agentStoppingSignal, ({ reason }) => markNotReady(`the agent is stopping: ${reason}`));
  setHandler(
    reserveUpdate,
    (request) => {
      const result = reserve(state, request, now());
      if (result.ok) publish();
      return result;
    },
    {
      validator: (request) => {
        if (!request.shardId) throw new Error('reserve needs a shardId');
        if (!Number.isInteger(request.count) || request.count < 0)
          throw new Error(`reserve count must be a whole number ≥ 0, got ${request.count}`);
      },
    },
  );
  setHandler(releaseUpdate, (request) => {
    const released = release(state, request.shardId);
    if (released) {
      publish();
      wakeWaiters();
    }
    return released;
  });
  setHandler(claimUpdate, (request) => {
    const result = claim(state, request, now());
    if (result.ok) publish();
    return result;
  });
  setHandler(cordonUpdate, ({ reason }) => {
    state.cordoned = true;
    state.reason = reason ? `cordoned: ${reason}` : 'cordoned';
    publish();
    return viewOf(state);
  });
  setHandler(uncordonUpdate, () => {
    state.cordoned = false;
    state.reason = 'uncordoned';
    publish();
    wakeWaiters();
    return viewOf(state);
  });
  setHandler(reconcileAllocationsUpdate, (request) => {
    const result = reconcileAllocations(state, request, now());
    if (result.claimed.length || result.released.length) {
      publish();
      if (result.released.length) wakeWaiters();
    }
    for (const conflict of result.conflicts) log.warn(conflict, { nodeId: state.nodeId });
    return result;
  });
  setHandler(describeNodeQuery, () => viewOf(state));
  // Added after the freeze, issuing nothing unless `llmgw upgrade` asks: hand over to the new code.
  let upgrade = false;
  setHandler(prepareUpgradeSignal, () => void (upgrade = true));

  const { presence } = proxyActivities<AgentActivities>({
    taskQueue: agentTaskQueue(state.nodeId),
    // No agent picking it up, or an agent that stops heartbeating, fails it within one
    // heartbeat period: that is how a dead agent is noticed at O(1) cost per host.
    scheduleToStartTimeout: `${heartbeatSeconds} seconds`,
    heartbeatTimeout: `${heartbeatSeconds} seconds`,
    startToCloseTimeout: '3650 days',
    retry: { maximumAttempts: 1 },
    cancellationType: ActivityCancellationType.TRY_CANCEL,
    summary: `presence of agent ${state.nodeId}`,
  });

  const watchPresence = async (): Promise<void> => {
    for (;;) {
      if (registerSeq === 0 && state.phase === 'Registering') await condition(() => registerSeq > 0);
      const seqAtStart = registerSeq;
      try {
        await presence({ nodeId: state.nodeId, heartbeatSeconds });
        markNotReady('the agent stopped (it ended its presence)');
      } catch (error) {
        if (isCancellation(error)) throw error;
        markNotReady(presenceFailureReason(error, heartbeatSeconds));
      }
      // The agent registers again when it comes back; until then, look again shortly.
      await condition(() => registerSeq !== seqAtStart, '3 seconds');
    }
  };

  const watchLost = async (): Promise<void> => {
    for (;;) {
      await condition(() => state.phase === 'NotReady');
      const since = state.notReadySince ? Date.parse(state.notReadySince) : Date.now();
      const remaining = Math.max(0, since + lostGraceMs - Date.now());
      const recovered = await condition(() => state.phase !== 'NotReady', remaining);
      if (recovered) continue;
      state.phase = 'Lost';
      state.reason = `agent unreachable for more than ${lostGraceMs / 1000} s; its GPUs are released`;
      log.warn('node lost', { nodeId: state.nodeId });
      tellReplicas();
      state.allocations = [];
      publish();
    }
  };

  // Every registration is reconciled: what the agent runs is matched against the catalog and
  // the replica workflows, one run at a time (a registration during a run queues one more).
  const { ensureReconcileSchedule } = proxyActivities<ControlActivities>({
    startToCloseTimeout: '20 seconds',
    retry: { maximumAttempts: 5 },
    summary: `ensure the reconcile Schedule of ${state.nodeId}`,
  });
  const reconcileEverySeconds = input.reconcileEverySeconds ?? 180;
  const runReconciles = async (): Promise<void> => {
    let scheduled = false;
    for (;;) {
      await condition(() => reconcileWanted);
      reconcileWanted = false;
      if (!scheduled && reconcileEverySeconds > 0) {
        scheduled = true;
        await ensureReconcileSchedule({
          nodeId: state.nodeId,
          everySeconds: reconcileEverySeconds,
          dryRun: input.reconcileDryRun ?? false,
        }).catch((error: unknown) => log.warn(`could not create the reconcile Schedule: ${String(error)}`));
      }
      try {
        await executeChild<typeof reconcileNode>('reconcileNode', {
          workflowId: `reconcile/${state.nodeId}/registration-${state.registrations}`,
          args: [{ nodeId: state.nodeId, trigger: `registration ${state.registrations}`, dryRun: input.reconcileDryRun ?? false }],
          parentClosePolicy: ParentClosePolicy.ABANDON,
          cancellationType: ChildWorkflowCancellationType.ABANDON,
          staticSummary: `reconcile ${state.nodeId} after registration ${state.registrations}`,
        });
      } catch (error) {
        if (isCancellation(error)) throw error;
        log.warn(`reconcile after registration failed: ${String(error)}`, { nodeId: state.nodeId });
      }
    }
  };

  publish();
  const scope = new CancellationScope();
  const watchers = scope.run(() => Promise.all([watchPresence(), watchLost(), runReconciles()]));
  watchers.catch(() => undefined);
  await condition(() => upgrade || workflowInfo().continueAsNewSuggested || workflowInfo().historyLength > HISTORY_LIMIT);
  scope.cancel();
  await watchers.catch(() => undefined);
  await condition(allHandlersFinished);
  await continueAsNew<typeof nodeV0>({ ...input, carried: state });
}

function presenceFailureReason(error: unknown, heartbeatSeconds: number): string {
  const cause = error instanceof ActivityFailure ? error.cause : error;
  const message = cause instanceof Error ? cause.message : String(cause);
  if (/schedule.?to.?start/i.test(message)) return `no agent picked up its presence activity within ${heartbeatSeconds} s`;
  if (/heartbeat/i.test(message)) return `the agent stopped heartbeating (timeout ${heartbeatSeconds} s)`;
  return `presence failed: ${message}`;
}

async function signalQuietly(workflowId: string, signalName: string, arg: unknown): Promise<void> {
  try {
    await getExternalWorkflowHandle(workflowId).signal(signalName, arg);
  } catch {
    // The replica may have finished; nothing to tell.
  }
}
