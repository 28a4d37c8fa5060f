// The replica's placement step: reserve GPUs through the node workflows, or wait as
// Unschedulable until GPUs are freed. The wait is event-driven: whoever frees GPUs
// (a release, a registration, an uncordon) signals capacityChanged to the waiting replicas
// that would fit (activities/capacity.ts); a long timer only re-checks in case a wake-up
// was lost. So a replica that waits for hours adds a handful of events, not thousands.
// Workflow side.
import { condition } from '@temporalio/workflow';
import { FORWARD_UNUSED_WAKE, LOCAL_PLACEMENT, QUIET_STEPS, RECHECK_AFTER_WAITING } from '../versions.js';
import { control, controlLocal } from './calls.js';
import type { ReplicaRun } from './run.js';

/** An Unschedulable replica looks again this often even when nothing woke it. */
const CAPACITY_RECHECK_SECONDS = 600;
/**
 * A replica that has just turned Unschedulable looks once more after this long: GPUs freed
 * while it was placing woke nobody (it was not yet a waiter in visibility).
 */
const RECHECK_AFTER_WAITING_MS = 2_000;
/** Quick retries when the capacity index was stale (a node had fewer GPUs than it said). */
const STALE_RETRIES = 5;

export async function place(run: ReplicaRun): Promise<boolean> {
  run.capacity.placing = true;
  try {
    return await placeLoop(run);
  } finally {
    run.capacity.placing = false;
  }
}

async function placeLoop(run: ReplicaRun): Promise<boolean> {
  const { state, profile, input } = run;
  // Wake-ups are kept until placed: forwardUnusedWakes passes them on once this replica is done.
  const keepWakes = run.capacity.forwarding === true;
  const recheckMs = (input.capacityRecheckSeconds ?? CAPACITY_RECHECK_SECONDS) * 1000;
  let quickRetries = 0;
  for (;;) {
    if (run.stopRequested()) return false;
    if (run.handOverDue()) await run.handOver();
    const avoiding = state.avoidNodes.length ? ` (avoiding ${state.avoidNodes.join(', ')} after failures there)` : '';
    const wanted = `${profile.nodes > 1 ? `${profile.nodes} hosts × ` : ''}${profile.gpusPerNode} ${profile.gpuClass} GPU${profile.gpusPerNode > 1 ? 's' : ''}`;
    // Once Unschedulable, it stays so while it retries: the UI and the router see one steady
    // state with its reason, not a flicker between Placing and Unschedulable.
    // Generations 4 and 5 (placement in a local activity, withdrawn): a new run's first look
    // answered in the same workflow task, so its Placing showed in the details only.
    const quiet = state.phase === 'Pending' && run.has(LOCAL_PLACEMENT) && run.has(QUIET_STEPS);
    if (state.phase !== 'Unschedulable') void run.setPhase('Placing', `looking for ${wanted}${avoiding}`, { quiet });
    const hint = run.capacity.hint;
    run.capacity.changed = false;
    run.capacity.hint = undefined;
    if (!keepWakes) run.capacity.woken = [];
    const controlCall = run.has(LOCAL_PLACEMENT) ? controlLocal : control;
    const result = await controlCall(`placeReplica: ${wanted}${avoiding}`).placeReplica({
      replicaId: run.replicaId,
      deployment: input.deployment,
      nodes: profile.nodes,
      gpusPerNode: profile.gpusPerNode,
      gpuClass: profile.gpuClass,
      minFreeMemoryMib: profile.minGpuMemoryMib,
      avoidNodes: state.avoidNodes,
      attempt: state.placements + 1,
      pool: input.labels?.pool,
      preferNodes: hint ? [hint] : [],
    });
    if (result.ok) {
      state.placements++;
      state.restartsHere = 0;
      state.shards = result.shards;
      if (!keepWakes && run.capacity.woken.length && run.has(FORWARD_UNUSED_WAKE)) await forwardWakes(run);
      return true;
    }
    // No capacity is not a failure: wait, say why, and look again when GPUs are freed. The
    // wake-ups so far found nothing for this replica, so none is left to pass on.
    if (keepWakes) run.capacity.woken = [];
    const wasWaiting = state.phase === 'Unschedulable';
    void run.setPhase('Unschedulable', result.reason);
    if (result.retryInMs && quickRetries < STALE_RETRIES) {
      // The index promised room that a node no longer had, or only avoided nodes have room:
      // look again shortly rather than wait for a wake-up that may never come.
      quickRetries++;
      await condition(() => run.capacity.changed || run.stopRequested(), result.retryInMs);
      if (result.onlyAvoidedFit && quickRetries >= 2) state.avoidNodes = [];
      continue;
    }
    quickRetries = 0;
    // Whoever freed GPUs while this replica was placing found no waiter to wake: now that it is
    // one, look once more (a drain-first rollout waited 10 minutes on exactly that).
    if (!wasWaiting && run.has(RECHECK_AFTER_WAITING)) {
      await condition(() => run.capacity.changed || run.stopRequested(), RECHECK_AFTER_WAITING_MS);
      continue;
    }
    const woken = await condition(() => run.capacity.changed || run.stopRequested() || run.handOverDue(), recheckMs);
    // A whole re-check period without capacity anywhere else: give avoided nodes another chance.
    if (!woken) state.avoidNodes = [];
  }
}

/**
 * From the start of a run (patched FORWARD_EVERY_WAKE): whenever this replica is not looking
 * for GPUs and holds wake-ups, it passes them on. Costs nothing until a wake-up comes.
 */
export function forwardUnusedWakes(run: ReplicaRun): void {
  run.capacity.forwarding = true;
  void (async () => {
    for (;;) {
      await condition(() => !run.capacity.placing && run.capacity.woken.length > 0);
      await forwardWakes(run);
    }
  })();
}

/**
 * Wake-ups that came while this replica was already placing were meant for GPUs it may not
 * have taken (whoever freed them read visibility before this replica left Unschedulable):
 * pass them on, or the replica they should have woken waits for the re-check.
 */
async function forwardWakes(run: ReplicaRun): Promise<void> {
  const nodeIds = [...new Set(run.capacity.woken)];
  run.capacity.woken = [];
  run.capacity.changed = false;
  await Promise.all(
    nodeIds.map((nodeId) =>
      control(`pass on the wake-up for ${nodeId}`)
        .wakeWaiters({ nodeId, exclude: [run.replicaId] })
        .catch(() => undefined),
    ),
  );
}
