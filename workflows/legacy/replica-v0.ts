// FROZEN: the replica workflow as it was before Worker Versioning (commit 2d2f513), kept so that
// runs started by that release replay exactly. Do not change what it does; see docs/upgrades.md.
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  CancellationScope,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  sleep,
  TimeoutFailure,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { create } from '@bufbuild/protobuf';
import type { AgentActivities } from '../../agent/activity-types.js';
import type { ControlActivities } from '../../activities/index.js';
import { agentTaskQueue } from '../../common/names.js';
import { FailureType, NON_RETRYABLE_AGENT_FAILURES } from '../../common/failures.js';
import { SA } from '../../common/search-attributes.js';
import { ShardState, StopShardSchema, WaitHealthySchema, type ShardStatus } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { startShardFor } from '../../common/profile-conversion.js';
import type { NodeStatusSignal } from '../../common/node-types.js';
import type { ReplicaInput, ReplicaPhase, ReplicaView, RouteMemo, ShardPlacement } from '../../common/replica-types.js';
import {
  capacityChangedSignal,
  nodeStatusSignal,
  replicaStatusQuery,
  replicaStatusSignal,
  shardTransitionSignal,
  stopReplicaSignal,
} from '../definitions.js';
import { replicaDetails } from '../replica/details.js';
import { prepareUpgradeSignal } from '../upgrade.js';
import type { replica } from '../replica/workflow.js';

/** Restarts on the same GPUs before the replica is placed elsewhere. */
const RESTARTS_PER_PLACEMENT = 2;
/** Placements (the first included) before the replica gives up as Failed. */
const MAX_PLACEMENTS = 2;
const HISTORY_LIMIT = 3_000;

export interface ReplicaState {
  phase: ReplicaPhase;
  reason: string;
  since: string;
  shards: ShardPlacement[];
  placements: number;
  /** Placements abandoned because the engine kept failing there (not because a host vanished). */
  failedPlacements: number;
  restartsHere: number;
  restarts: number;
  avoidNodes: string[];
  stopReason: string | undefined;
}

type Event = { kind: 'shard'; status: ShardStatus } | { kind: 'node'; status: NodeStatusSignal };
type Outcome =
  { kind: 'stop' } | { kind: 'restart'; reason: string } | { kind: 'replace'; reason: string; nodeId: string; agentGone: boolean };

/** Control activities with a summary the Web UI shows beside each call. */
function control(summary: string): ControlActivities {
  return proxyActivities<ControlActivities>({
    // Control activities are quick; a short timeout lets a killed worker's work move on fast.
    startToCloseTimeout: '20 seconds',
    retry: { maximumAttempts: 5, nonRetryableErrorTypes: [FailureType.UnknownModel, FailureType.UnknownProfile] },
    summary,
  });
}

function agent(nodeId: string, options: { summary: string; startToCloseSeconds?: number; heartbeatSeconds?: number }): AgentActivities {
  return proxyActivities<AgentActivities>({
    taskQueue: agentTaskQueue(nodeId),
    // No agent polling its queue → fail fast and place elsewhere rather than wait for ever.
    scheduleToStartTimeout: '20 seconds',
    startToCloseTimeout: `${options.startToCloseSeconds ?? 120} seconds`,
    heartbeatTimeout: options.heartbeatSeconds ? `${options.heartbeatSeconds} seconds` : undefined,
    retry: { maximumAttempts: 3, initialInterval: '1 second', nonRetryableErrorTypes: NON_RETRYABLE_AGENT_FAILURES },
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    summary: options.summary,
  });
}

export async function replicaV0(input: ReplicaInput): Promise<ReplicaView> {
  const replicaId = workflowInfo().workflowId;
  const profile = input.profile;
  const drainGraceMs = (input.drainGraceSeconds ?? 5) * 1000;
  const state: ReplicaState = (input.carried as ReplicaState | undefined) ?? {
    phase: 'Pending',
    reason: 'waiting to be placed',
    since: new Date().toISOString(),
    shards: input.adopt ?? [],
    // Later placements get shard ids the adopted engines never had.
    placements: Math.max(0, ...(input.adopt ?? []).map((s) => Number(/\.a(\d+)$/.exec(s.shardId)?.[1] ?? 1))),
    failedPlacements: 0,
    restartsHere: 0,
    restarts: 0,
    avoidNodes: [],
    stopReason: undefined,
  };
  const events: Event[] = [];
  /** The time of the newest nodeStatus seen per node. */
  const nodeSeen: Record<string, string> = {};
  let capacityChanged = false;

  const view = (): ReplicaView => ({
    replicaId,
    seq: input.seq,
    phase: state.phase,
    reason: state.reason,
    nodes: [...new Set(state.shards.map((s) => s.nodeId))],
    gpus: state.shards.map((s) => `${s.nodeId}:${s.gpuIndices.join(',')}`),
    endpoint: endpointOf(state.shards),
    shards: state.shards,
    placements: state.placements,
    restarts: state.restarts,
    since: state.since,
  });

  const setPhase = (phase: ReplicaPhase, reason: string): Promise<void> => {
    if (state.phase !== phase) state.since = new Date().toISOString();
    state.phase = phase;
    state.reason = reason;
    log.info(`replica ${phase}: ${reason}`);
    const route: RouteMemo = {
      deployment: input.deployment,
      servedName: profile.servedName,
      endpoint: endpointOf(state.shards),
      phase,
      replicaId,
    };
    upsertMemo({ route });
    upsertSearchAttributes([
      { key: SA.state, value: phase },
      { key: SA.deployment, value: input.deployment },
      { key: SA.model, value: profile.model },
      { key: SA.gpuClass, value: profile.gpuClass },
      { key: SA.nodes, value: [...new Set(state.shards.map((s) => s.nodeId))] },
    ]);
    setCurrentDetails(replicaDetails(replicaId, profile, state));
    return tellDeployment(input.deploymentWorkflowId, view());
  };

  setHandler(shardTransitionSignal, (status) => void events.push({ kind: 'shard', status }));
  setHandler(nodeStatusSignal, (status) => void events.push({ kind: 'node', status }));
  setHandler(capacityChangedSignal, () => void (capacityChanged = true));
  setHandler(stopReplicaSignal, ({ reason }) => void (state.stopReason ??= reason));
  setHandler(replicaStatusQuery, view);
  // Added after the freeze, issuing nothing unless `llmgw upgrade` asks: hand over to the new code
  // when Ready (or while waiting for capacity).
  let upgrade = false;
  setHandler(prepareUpgradeSignal, () => void (upgrade = true));

  const stopRequested = (): boolean => state.stopReason !== undefined;

  const releaseAll = async (): Promise<void> => {
    for (const shard of state.shards)
      await control(`release GPUs ${shard.gpuIndices.join(',')} on ${shard.nodeId}`).releaseGpus({
        nodeId: shard.nodeId,
        shardId: shard.shardId,
      });
  };

  const stopShards = async (reason: string, reachable: (nodeId: string) => boolean = () => true): Promise<void> => {
    // Worker ranks first, the leader last: the leader's exit would only make the others fail.
    for (const shard of [...state.shards].sort((a, b) => b.rank - a.rank)) {
      if (!reachable(shard.nodeId)) continue;
      try {
        await agent(shard.nodeId, {
          summary: `stopShard rank ${shard.rank} on ${shard.nodeId}`,
          startToCloseSeconds: 90,
          heartbeatSeconds: 20,
        }).stopShard(create(StopShardSchema, { shardId: shard.shardId, replicaId, graceSeconds: 10, reason }));
      } catch (error) {
        // An unreachable agent cannot stop its engine; the node's reconciliation will.
        log.warn(`stopShard ${shard.shardId} failed: ${String(error)}`);
      }
    }
  };

  // Placement: reserve GPUs through the node workflows, or wait (Unschedulable) for capacity.
  const place = async (): Promise<boolean> => {
    for (let waits = 0; !stopRequested(); waits++) {
      const avoiding = state.avoidNodes.length ? ` (avoiding ${state.avoidNodes.join(', ')} after failures there)` : '';
      // Once Unschedulable, it stays so while it retries: the UI and the router see one
      // steady state with its reason, not a flicker between Placing and Unschedulable.
      if (waits === 0)
        void setPhase(
          'Placing',
          `looking for ${profile.nodes > 1 ? `${profile.nodes} hosts × ` : ''}${profile.gpusPerNode} ${profile.gpuClass} GPU${profile.gpusPerNode > 1 ? 's' : ''}${avoiding}`,
        );
      capacityChanged = false;
      if (upgrade) {
        await condition(allHandlersFinished);
        await continueAsNew<typeof replica>({ ...input, carried: state });
      }
      const result = await control(
        `placeReplica: ${profile.nodes > 1 ? `${profile.nodes} hosts × ` : ''}${profile.gpusPerNode} ${profile.gpuClass} GPU(s)${avoiding}`,
      ).placeReplica({
        replicaId,
        deployment: input.deployment,
        nodes: profile.nodes,
        gpusPerNode: profile.gpusPerNode,
        gpuClass: profile.gpuClass,
        minFreeMemoryMib: profile.minGpuMemoryMib,
        avoidNodes: state.avoidNodes,
        attempt: state.placements + 1,
        pool: input.labels?.pool,
      });
      if (result.ok) {
        state.placements++;
        state.restartsHere = 0;
        state.shards = result.shards;
        return true;
      }
      // No capacity is not a failure: wait, say why, and try again as soon as a node frees
      // GPUs or registers (capacityChanged), or after a bounded backoff.
      void setPhase('Unschedulable', result.reason);
      await condition(() => capacityChanged || stopRequested(), Math.min(10_000, 1_000 * 2 ** Math.min(waits, 4)));
      // After a few rounds, give avoided nodes another chance rather than wait for ever.
      if (waits >= 3) state.avoidNodes = [];
    }
    return false;
  };

  // Start every rank (rank 0 first), then wait for the leader to be healthy.
  const startAndWait = async (): Promise<Outcome | 'ready'> => {
    events.length = 0;
    // Rank 0 first: its agent chooses the rendezvous port, which the other ranks are given.
    let leaderPort = 0;
    for (const shard of [...state.shards].sort((a, b) => a.rank - b.rank)) {
      void setPhase('Starting', `startShard rank ${shard.rank} on ${shard.nodeId}, GPUs ${shard.gpuIndices.join(',')}`);
      // A host whose agent is known to be gone for good (Lost) does not get to run out a start
      // timeout. A NotReady one may be an agent restarting mid-start: the retried startShard
      // reaches the new agent, which finds the spec and starts the engine exactly once.
      const startScope = new CancellationScope();
      const nodeDown = (): boolean =>
        events.some((e) => e.kind === 'node' && e.status.nodeId === shard.nodeId && e.status.phase === 'Lost');
      let startDone = false;
      void condition(() => nodeDown() || startDone).then(() => {
        if (!startDone) startScope.cancel();
      });
      try {
        const running = await startScope.run(() =>
          agent(shard.nodeId, {
            summary: `startShard rank ${shard.rank} on ${shard.nodeId}, GPUs ${gpuRange(shard.gpuIndices)}`,
            heartbeatSeconds: 10,
          }).startShard(
            startShardFor(shard, {
              replicaId,
              deployment: input.deployment,
              snapshot: profile,
              shards: state.shards,
              leaderPort: shard.rank === 0 ? 0 : leaderPort,
            }),
          ),
        );
        shard.httpPort = running.status?.httpPort ?? 0;
        shard.pid = running.status?.pid ?? 0;
        shard.state = 'Starting';
        if (shard.rank === 0) leaderPort = running.status?.leaderPort ?? 0;
        startDone = true;
      } catch (error) {
        startDone = true;
        if (nodeDown() && isCancellation(error))
          return {
            kind: 'replace',
            reason: `the agent on ${shard.nodeId} became unreachable during startShard`,
            nodeId: shard.nodeId,
            agentGone: true,
          };
        return failureOutcome(error, shard.nodeId, `starting rank ${shard.rank} on ${shard.nodeId}`);
      }
    }
    return awaitHealthy(`waiting for ${endpointOf(state.shards)} to be healthy (startup timeout ${profile.startupTimeoutSeconds} s)`);
  };

  // The leader's health decides; a worker rank that exits meanwhile fails the whole replica.
  const awaitHealthy = async (why: string): Promise<Outcome | 'ready'> => {
    const leader = state.shards.find((s) => s.rank === 0);
    if (!leader) return { kind: 'replace', reason: 'no rank 0 among its shards', nodeId: state.shards[0]?.nodeId ?? '', agentGone: false };
    void setPhase('Loading', why);
    const scope = new CancellationScope();
    const healthy = scope.run(() =>
      agent(leader.nodeId, {
        summary: `waitHealthy rank 0 on ${leader.nodeId}`,
        startToCloseSeconds: profile.startupTimeoutSeconds + 60,
        heartbeatSeconds: 30,
      }).waitHealthy(create(WaitHealthySchema, { shardId: leader.shardId, timeoutSeconds: profile.startupTimeoutSeconds })),
    );
    let outcome: Outcome | 'ready' | undefined;
    const watchOthers = async (): Promise<void> => {
      // A worker rank that exits while the leader loads fails the whole replica.
      await condition(
        () => stopRequested() || events.some((e) => e.kind === 'shard' && isExitOf(e.status, state.shards) && e.status.rank !== 0),
      );
      scope.cancel();
    };
    void watchOthers();
    try {
      await healthy;
      leader.state = 'Ready';
      // The leader serves only once its group formed; each other rank is Ready once its
      // process is up (and, being in the group, joined).
      for (const shard of state.shards.filter((s) => s.rank !== 0)) {
        await scope.run(() =>
          agent(shard.nodeId, {
            summary: `waitHealthy rank ${shard.rank} on ${shard.nodeId}`,
            startToCloseSeconds: 120,
            heartbeatSeconds: 30,
          }).waitHealthy(create(WaitHealthySchema, { shardId: shard.shardId, timeoutSeconds: 60 })),
        );
        shard.state = 'Ready';
      }
      outcome = 'ready';
      // The leader's agent just answered: what it was said to be before (NotReady during an
      // agent restart, say) is history.
      for (let i = events.length - 1; i >= 0; i--) {
        const e = events[i]!;
        if (e.kind === 'node' && e.status.nodeId === leader.nodeId && e.status.phase === 'NotReady') events.splice(i, 1);
      }
    } catch (error) {
      if (stopRequested()) return { kind: 'stop' };
      const workerExit = events.find((e): e is Extract<Event, { kind: 'shard' }> => e.kind === 'shard' && isExitOf(e.status, state.shards));
      if (workerExit && isCancellation(error))
        return { kind: 'restart', reason: `rank ${workerExit.status.rank} exited while loading: ${workerExit.status.message}` };
      outcome = failureOutcome(error, leader.nodeId, `loading on ${leader.nodeId}`);
    }
    return outcome;
  };

  // Ready: only transitions arrive (as signals); steady state costs nothing.
  const watchReady = async (): Promise<Outcome> => {
    for (;;) {
      await condition(() => upgrade || events.length > 0 || stopRequested() || workflowInfo().historyLength > HISTORY_LIMIT);
      if (stopRequested()) return { kind: 'stop' };
      const event = events.shift();
      if (!event) {
        await condition(allHandlersFinished);
        await continueAsNew<typeof replica>({ ...input, carried: state });
      }
      if (!event) continue;
      if (event.kind === 'shard') {
        if (!isExitOf(event.status, state.shards) && event.status.state !== ShardState.FAILED) continue;
        const shard = state.shards.find((s) => s.shardId === event.status.shardId);
        if (!shard || (event.status.pid && shard.pid && event.status.pid !== shard.pid)) continue; // an older process of this shard
        return { kind: 'restart', reason: `rank ${shard.rank} on ${shard.nodeId}: ${event.status.message || 'engine failed'}` };
      }
      const { nodeId, phase, reason, at } = event.status;
      if (!state.shards.some((s) => s.nodeId === nodeId)) continue;
      // Signals from one node can arrive out of order: the newest word on a node wins.
      if (at && (nodeSeen[nodeId] ?? '') > at) continue;
      if (at) nodeSeen[nodeId] = at;
      if (phase === 'NotReady')
        void setPhase('Unknown', `agent on ${nodeId} unreachable (${reason}); the engine keeps its traffic while it answers`);
      else if (phase === 'Ready' && state.phase === 'Unknown') void setPhase('Ready', `agent on ${nodeId} is back`);
      else if (phase === 'Lost') return { kind: 'replace', reason: `node ${nodeId} lost: ${reason}`, nodeId, agentGone: true };
    }
  };

  const resumeReady = state.shards.length > 0 && (state.phase === 'Ready' || state.phase === 'Unknown');
  let outcome: Outcome | 'ready' = resumeReady ? 'ready' : { kind: 'restart', reason: '' };
  if (input.adopt?.length && !input.carried) {
    // Rebuilt by reconciliation around engines that never stopped: check they serve, and
    // restart them only if they do not.
    const pids = state.shards.map((s) => `rank ${s.rank} pid ${s.pid} on ${s.nodeId}`).join(', ');
    outcome = await awaitHealthy(`adopted running engines (${pids}); checking the leader's health`);
  }

  while (!stopRequested()) {
    if (outcome !== 'ready') {
      if (!state.shards.length && !(await place())) break;
      outcome = await startAndWait();
    }
    if (outcome === 'ready') {
      state.restartsHere = 0;
      void setPhase('Ready', `serving at ${endpointOf(state.shards)}`);
      outcome = await watchReady();
    }
    if (outcome.kind === 'stop') break;
    if (outcome.kind === 'restart' && outcome.reason === '') continue;

    // Something failed: restart on the same GPUs with backoff, then re-place avoiding the
    // node, then give up as Failed (the deployment replaces it, with its own backoff).
    state.restarts++;
    const failedNode = outcome.kind === 'replace' ? outcome.nodeId : (state.shards[0]?.nodeId ?? '');
    if (outcome.kind === 'restart' && state.restartsHere < RESTARTS_PER_PLACEMENT) {
      state.restartsHere++;
      const backoffMs = 2_000 * 2 ** (state.restartsHere - 1);
      void setPhase(
        'Starting',
        `${outcome.reason}; restarting on the same GPUs in ${backoffMs / 1000} s (restart ${state.restartsHere} of ${RESTARTS_PER_PLACEMENT})`,
      );
      await stopShards(`restart: ${outcome.reason}`);
      await condition(stopRequested, backoffMs);
      continue;
    }
    const agentGone = outcome.kind === 'replace' && outcome.agentGone;
    await stopShards(`re-placing: ${outcome.reason}`, (nodeId) => !(agentGone && nodeId === failedNode));
    await releaseAll();
    state.shards = [];
    if (failedNode && !state.avoidNodes.includes(failedNode)) state.avoidNodes.push(failedNode);
    // A host that vanished is not the engine's fault; only engine failures count towards giving up.
    if (outcome.kind !== 'replace') state.failedPlacements++;
    if (state.failedPlacements >= MAX_PLACEMENTS) {
      // Awaited: the deployment must hear the final state before this workflow closes.
      await setPhase('Failed', `gave up after ${state.failedPlacements} placements and ${state.restarts} restarts: ${outcome.reason}`);
      return view();
    }
    void setPhase('Placing', `${outcome.reason}; placing elsewhere (avoiding ${state.avoidNodes.join(', ')})`);
    outcome = { kind: 'restart', reason: '' };
  }

  // Draining: withdraw the route first, give in-flight requests the grace, then stop.
  if (state.shards.length) {
    void setPhase('Draining', `${state.stopReason ?? 'stop requested'}; route withdrawn, stopping in ${drainGraceMs / 1000} s`);
    await sleep(drainGraceMs);
    await stopShards(state.stopReason ?? 'drained');
    await releaseAll();
  }
  await setPhase('Stopped', state.stopReason ?? 'stopped');
  await condition(allHandlersFinished);
  return view();
}

function failureOutcome(error: unknown, nodeId: string, what: string): Outcome {
  if (isCancellation(error)) throw error;
  const cause = error instanceof ActivityFailure ? error.cause : error;
  if (cause instanceof TimeoutFailure) {
    return {
      kind: 'replace',
      reason: `${what}: the agent did not answer (${cause.timeoutType === 'SCHEDULE_TO_START' ? 'no agent polling its queue' : 'timed out'})`,
      nodeId,
      agentGone: true,
    };
  }
  if (cause instanceof ApplicationFailure) {
    switch (cause.type) {
      case FailureType.EngineExited:
      case FailureType.StartupTimeout:
        return { kind: 'restart', reason: `${what}: ${firstLine(cause.message)}` };
      case FailureType.InvalidSpec:
      case FailureType.SpecConflict:
      case FailureType.NoFreePort:
      case FailureType.StateDirUnwritable:
        return { kind: 'replace', reason: `${what}: ${firstLine(cause.message)}`, nodeId, agentGone: false };
      default:
        return { kind: 'restart', reason: `${what}: ${firstLine(cause.message)}` };
    }
  }
  return { kind: 'restart', reason: `${what}: ${firstLine(cause instanceof Error ? cause.message : String(cause))}` };
}

function isExitOf(status: ShardStatus, shards: ShardPlacement[]): boolean {
  const shard = shards.find((s) => s.shardId === status.shardId);
  if (!shard) return false;
  if (status.pid && shard.pid && status.pid !== shard.pid) return false;
  return status.state === ShardState.FAILED || status.state === ShardState.STOPPED;
}

function endpointOf(shards: ShardPlacement[]): string {
  const leader = shards.find((s) => s.rank === 0);
  return leader && leader.httpPort ? `http://${leader.managementAddress || '127.0.0.1'}:${leader.httpPort}` : '';
}

function gpuRange(indices: number[]): string {
  const sorted = [...indices].sort((a, b) => a - b);
  const contiguous = sorted.every((value, i) => i === 0 || value === sorted[i - 1]! + 1);
  return contiguous && sorted.length > 2 ? `${sorted[0]}–${sorted[sorted.length - 1]}` : sorted.join(',');
}

/** The first line of a failure and, when it quotes a log, its last line: what an operator needs. */
function firstLine(text: string): string {
  const lines = text
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const head = (lines[0] ?? text).replace(/;?\s*last log lines:\s*$/, '');
  const last = lines.length > 1 ? lines[lines.length - 1] : undefined;
  return last ? `${head} — ${last}` : head;
}

async function tellDeployment(deploymentWorkflowId: string, view: ReplicaView): Promise<void> {
  try {
    await getExternalWorkflowHandle(deploymentWorkflowId).signal(replicaStatusSignal, view);
  } catch {
    // The deployment is gone (rebuilt later by reconciliation); the replica carries on.
  }
}
