// The `replica` workflow (replica/<deployment>/<seq>): one replica's whole life, as a small
// loop over its steps: place (place.ts) → start and load (start.ts) → Ready (watch.ts) →
// drain (drain.ts), with restarts, re-placement and giving up in between. State is one plain
// object (state.ts) that crosses continue-as-new, which happens in one place (handOver).
import { revisionOfSnapshot } from '../../common/revision.js';
import { allHandlersFinished, ApplicationFailure, condition, patched, setHandler, workflowInfo } from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import type { ReplicaInput, ReplicaView } from '../../common/replica-types.js';
import { capacityChangedSignal, nodeStatusSignal, replicaStatusQuery, shardTransitionSignal, stopReplicaSignal } from '../definitions.js';
import { replicaV0 } from '../legacy/replica-v0.js';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { FORWARD_EVERY_WAKE, QUICK_STOP_ON_AGENT_GONE, REPLICA_GENERATIONS, VERSIONED_RELEASE } from '../versions.js';
import { drain, releaseShards, stopAndRelease, stopShards } from './drain.js';
import { describeReplicaInputIssues, ReplicaInputSchema } from './input.js';
import { forwardUnusedWakes, place } from './place.js';
import { createPublisher, type ReplicaEvent, type ReplicaRun } from './run.js';
import { awaitHealthy, startAndWait } from './start.js';
import { carriedReplicaState, endpointOf, initialReplicaState, replicaView, type Outcome } from './state.js';
import { watchReady } from './watch.js';

/** Restarts on the same GPUs before the replica is placed elsewhere. */
const RESTARTS_PER_PLACEMENT = 2;
/** Placements (the first included) before the replica gives up as Failed. */
const MAX_PLACEMENTS = 2;
/** Hand over to a new run after this many events, if the server has not suggested it sooner. */
const HISTORY_LIMIT = 3_000;

export type { ReplicaState } from './state.js';

export async function replica(rawInput: ReplicaInput): Promise<ReplicaView> {
  // Runs started before Worker Versioning replay (and carry on) on the code they started with.
  // A new run holds every replica patch so far (VERSIONED_RELEASE included) in one generation
  // marker: each patch marker also upserts TemporalChangeVersion, an event and a visibility
  // write per patch per replica. Runs recorded before a generation take its patches as they did.
  const implied = generationPatches();
  if (!implied.has(VERSIONED_RELEASE) && !patched(VERSIONED_RELEASE)) return replicaV0(rawInput);
  const withdrawn = new Set(REPLICA_GENERATIONS.flatMap((g) => g.withdraws ?? []));
  const has = (patchId: string): boolean => implied.has(patchId) || (!withdrawn.has(patchId) && patched(patchId));
  const parsed = ReplicaInputSchema.safeParse(rawInput);
  if (!parsed.success) {
    throw ApplicationFailure.nonRetryable(`invalid replica input: ${describeReplicaInputIssues(parsed.error)}`, FailureType.InvalidInput);
  }
  const input = parsed.data as ReplicaInput;
  const info = workflowInfo();
  // Carried state is ours alone: honouring it in a run someone started by hand would let them
  // skip placement and claim any GPUs.
  if (input.carried !== undefined && !info.continuedFromExecutionRunId) {
    throw ApplicationFailure.nonRetryable(
      'invalid replica input: carried is internal state of a continued run; leave it out',
      FailureType.InvalidInput,
    );
  }
  const now = (): string => new Date().toISOString();
  const replicaId = info.workflowId;
  const state = input.carried !== undefined ? carriedReplicaState(input.carried) : initialReplicaState(input, now());
  const events: ReplicaEvent[] = [];
  const capacity = { changed: false, hint: undefined as string | undefined, woken: [] as string[] };
  const stopRequested = (): boolean => state.stopReason !== undefined;

  setHandler(shardTransitionSignal, (status) => void events.push({ kind: 'shard', status }));
  setHandler(nodeStatusSignal, (status) => void events.push({ kind: 'node', status }));
  setHandler(capacityChangedSignal, ({ nodeId }) => {
    capacity.changed = true;
    capacity.hint = nodeId;
    if (!capacity.woken.includes(nodeId)) capacity.woken.push(nodeId);
  });
  setHandler(stopReplicaSignal, ({ reason }) => void (state.stopReason ??= reason));
  setHandler(replicaStatusQuery, () => replicaView(replicaId, input.seq, state, revisionOfSnapshot(input.profile)));
  const upgrade = watchUpgrades();

  const historyLimit = input.continueAsNewAfterEvents ?? HISTORY_LIMIT;
  const run: ReplicaRun = {
    input,
    replicaId,
    profile: input.profile,
    state,
    events,
    capacity,
    stopRequested,
    handOverDue: () => upgrade.requested() || workflowInfo().continueAsNewSuggested || workflowInfo().historyLength > historyLimit,
    async handOver() {
      await condition(allHandlersFinished);
      const upgrading = upgrade.requested();
      return continueAsNewWith<typeof replica>(upgrading)({ ...input, carried: state, upgrading });
    },
    // A run continued by this release got its predecessor's memo; one continued by the frozen
    // code did not, and publishes again.
    setPhase: createPublisher(input, replicaId, state, now, input.carried !== undefined && info.memo?.route !== undefined, has),
    view: () => replicaView(replicaId, input.seq, state, revisionOfSnapshot(input.profile)),
    has,
  };
  await upgrade.park(input.upgrading);
  if (has(FORWARD_EVERY_WAKE)) forwardUnusedWakes(run);
  // A continued run whose memo did not come along publishes its state again (a no-op otherwise).
  if (input.carried !== undefined) void run.setPhase(state.phase, state.reason);

  // Where to begin: a run continued while Ready or Unknown keeps watching (Unknown stays
  // Unknown until its node says otherwise); one continued while Draining finishes the drain.
  const resumed = input.carried !== undefined && state.shards.length > 0 && (state.phase === 'Ready' || state.phase === 'Unknown');
  let outcome: Outcome | 'ready' = resumed ? 'ready' : { kind: 'restart', reason: '' };
  if (input.adopt?.length && input.carried === undefined) {
    // Rebuilt by reconciliation around engines that never stopped: check they serve, and
    // restart them only if they do not.
    const pids = state.shards.map((s) => `rank ${s.rank} pid ${s.pid} on ${s.nodeId}`).join(', ');
    outcome = await awaitHealthy(run, `adopted running engines (${pids}); checking the leader's health`);
  }
  let keepUnknown = resumed && state.phase === 'Unknown';

  while (!stopRequested()) {
    if (outcome !== 'ready') {
      if (!state.shards.length && !(await place(run))) break;
      if (stopRequested()) break;
      outcome = await startAndWait(run);
    }
    if (outcome === 'ready') {
      state.restartsHere = 0;
      if (!keepUnknown) void run.setPhase('Ready', `serving at ${endpointOf(state.shards)}`);
      keepUnknown = false;
      outcome = await watchReady(run);
    }
    if (outcome.kind === 'stop') break;
    if (outcome.kind === 'restart' && outcome.reason === '') continue;
    if (outcome.kind === 'fail') {
      // Nothing was started (the agent refused before spawning): give the GPUs back and say why.
      await stopAndRelease(run, outcome.reason, 'Placing');
      await run.setPhase('Failed', outcome.reason);
      await condition(allHandlersFinished);
      return run.view();
    }

    // Something failed: restart on the same GPUs with backoff, then re-place avoiding the
    // node, then give up as Failed (the deployment replaces it, with its own backoff).
    state.restarts++;
    const failedNode = outcome.kind === 'replace' ? outcome.nodeId : (state.shards[0]?.nodeId ?? '');
    if (outcome.kind === 'restart' && state.restartsHere < RESTARTS_PER_PLACEMENT) {
      state.restartsHere++;
      const backoffMs = 2_000 * 2 ** (state.restartsHere - 1);
      void run.setPhase(
        'Starting',
        `${outcome.reason}; restarting on the same GPUs in ${backoffMs / 1000} s (restart ${state.restartsHere} of ${RESTARTS_PER_PLACEMENT})`,
      );
      // The engines stop; the GPUs stay this replica's for the restart.
      await stopShards(run, `restart: ${outcome.reason}`, state.shards);
      await condition(stopRequested, backoffMs);
      continue;
    }
    // Re-placing: the old GPUs go back once their engines are confirmed stopped. An agent
    // that is gone cannot confirm; its node releases them when it turns Lost.
    const agentGone = outcome.kind === 'replace' && outcome.agentGone;
    if (agentGone) {
      // It may only have been slow: one quick try to stop what runs there. If the agent is really
      // gone, its shards keep their GPUs until the node turns Lost, and the engines are stopped by
      // reconciliation when it returns.
      const there = state.shards.filter((s) => s.nodeId === failedNode);
      if (has(QUICK_STOP_ON_AGENT_GONE)) {
        const unconfirmed = await stopShards(run, `re-placing: ${outcome.reason}`, there, { quick: true });
        await releaseShards(there.filter((s) => !unconfirmed.includes(s.shardId)));
      }
      state.shards = state.shards.filter((s) => s.nodeId !== failedNode);
    }
    await stopAndRelease(run, `re-placing: ${outcome.reason}`, 'Placing');
    state.shards = [];
    if (failedNode && !state.avoidNodes.includes(failedNode)) state.avoidNodes.push(failedNode);
    // A host that vanished is not the engine's fault; only engine failures count towards giving up.
    if (outcome.kind !== 'replace') state.failedPlacements++;
    if (state.failedPlacements >= MAX_PLACEMENTS) {
      // Awaited: the deployment must hear the final state before this workflow closes.
      await run.setPhase('Failed', `gave up after ${state.failedPlacements} placements and ${state.restarts} restarts: ${outcome.reason}`);
      await condition(allHandlersFinished);
      return run.view();
    }
    void run.setPhase('Placing', `${outcome.reason}; placing elsewhere (avoiding ${state.avoidNodes.join(', ')})`);
    outcome = { kind: 'restart', reason: '' };
  }

  await drain(run, { graceMs: (input.drainGraceSeconds ?? 5) * 1000, timeoutMs: (input.drainTimeoutSeconds ?? 600) * 1000 });
  await run.setPhase('Stopped', state.stopReason ?? 'stopped');
  await condition(allHandlersFinished);
  return run.view();
}

/**
 * The patches this run's generation marker implies: the newest marker a new run records, or
 * the one an older run recorded (a later generation implies every earlier one's patches, less
 * those it withdraws).
 */
function generationPatches(): Set<string> {
  for (let i = REPLICA_GENERATIONS.length - 1; i >= 0; i--) {
    if (!patched(REPLICA_GENERATIONS[i]!.marker)) continue;
    const implied = new Set<string>();
    for (const generation of REPLICA_GENERATIONS.slice(0, i + 1)) {
      generation.patches.forEach((p) => implied.add(p));
      generation.withdraws?.forEach((p) => implied.delete(p));
    }
    return implied;
  }
  return new Set();
}
