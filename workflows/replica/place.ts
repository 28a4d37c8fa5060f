// The replica's place step: reserve GPUs through the node workflows, or wait as Unschedulable
// until GPUs are freed. The wait is event-driven: whoever frees GPUs (a release, a
// registration, an uncordon) signals capacityChanged to the waiting replicas that would fit
// (activities/capacity.ts); a long timer only re-checks in case a wake-up was lost. So a
// replica that waits for hours adds a handful of events, not thousands. Workflow side.
import { condition } from '@temporalio/workflow';
import { awakeShareOf } from '../../common/placement/shared-gpus.js';
import { control } from './calls.js';
import type { ReplicaContext } from './context.js';
import type { Next } from './steps.js';

/** An Unschedulable replica looks again this often even when nothing woke it. */
const CAPACITY_RECHECK_SECONDS = 600;
/**
 * A replica that has just turned Unschedulable looks again after each of these before it
 * settles into waiting: GPUs freed, or a node registered, while it was placing woke nobody (it
 * was not yet a waiter in visibility), and visibility may show that node seconds late on a busy
 * server (a 2-host gang waited 10 minutes on a host registered a moment before). Three looks,
 * a handful of events, once per wait.
 */
const EARLY_LOOKS_MS = [2_000, 10_000, 30_000];
/** Quick retries when the capacity index was stale (a node had fewer GPUs than it said). */
const STALE_RETRIES = 5;

export async function place(ctx: ReplicaContext): Promise<Next> {
  ctx.capacity.placing = true;
  try {
    return await placeLoop(ctx);
  } finally {
    ctx.capacity.placing = false;
  }
}

async function placeLoop(ctx: ReplicaContext): Promise<Next> {
  const { state, profile, input } = ctx;
  const recheckMs = (input.capacityRecheckSeconds ?? CAPACITY_RECHECK_SECONDS) * 1000;
  let quickRetries = 0;
  let earlyLooks = 0;
  for (;;) {
    if (ctx.stopRequested()) return { step: 'drain' };
    if (ctx.handOverDue()) return { step: 'handOver', resume: { step: 'place' } };
    const avoiding = state.avoidNodes.length ? ` (avoiding ${state.avoidNodes.join(', ')} after failures there)` : '';
    const wanted = `${profile.nodes > 1 ? `${profile.nodes} hosts × ` : ''}${profile.gpusPerNode} ${profile.gpuClass} GPU${profile.gpusPerNode > 1 ? 's' : ''}`;
    // Once Unschedulable, it stays so while it retries: the UI and the router see one steady
    // state with its reason, not a flicker between Placing and Unschedulable.
    if (state.phase !== 'Unschedulable') void ctx.setPhase('Placing', `looking for ${wanted}${avoiding}`);
    const hint = ctx.capacity.hint;
    ctx.capacity.changed = false;
    ctx.capacity.hint = undefined;
    const result = await control(`placeReplica: ${wanted}${avoiding}`).placeReplica({
      replicaId: ctx.replicaId,
      deployment: input.deployment,
      nodes: profile.nodes,
      gpusPerNode: profile.gpusPerNode,
      gpuClass: profile.gpuClass,
      minFreeMemoryMib: profile.minGpuMemoryMib,
      avoidNodes: state.avoidNodes,
      attempt: state.placements + 1,
      pool: input.labels?.pool,
      preferNodes: hint ? [hint] : [],
      revision: profile.signature ?? '',
      servedName: profile.servedName,
      modelSource: profile.modelSource,
      // Able to sleep, it may share GPUs with sleepers (docs/sleep.md, "Sharing GPUs").
      ...(profile.sleep ? { awakeShare: awakeShareOf(profile.engine, profile.args) } : {}),
    });
    if (result.ok) {
      state.placements++;
      state.restartsHere = 0;
      state.shards = result.shards;
      return { step: 'fetch' };
    }
    // No capacity is not a failure: wait, say why, and look again when GPUs are freed. The
    // wake-ups so far found nothing for this replica, so none is left to pass on.
    ctx.capacity.woken = [];
    void ctx.setPhase('Unschedulable', result.reason);
    if (result.retryInMs && quickRetries < STALE_RETRIES) {
      // The index promised room that a node no longer had, or only avoided nodes have room:
      // look again shortly rather than wait for a wake-up that may never come.
      quickRetries++;
      await condition(() => ctx.capacity.changed || ctx.stopRequested(), result.retryInMs);
      if (result.onlyAvoidedFit && quickRetries >= 2) state.avoidNodes = [];
      continue;
    }
    quickRetries = 0;
    // Whoever freed GPUs while this replica was placing found no waiter to wake: now that it is
    // one, look again a few times (a drain-first rollout waited 10 minutes on exactly that).
    if (earlyLooks < EARLY_LOOKS_MS.length) {
      await condition(() => ctx.capacity.changed || ctx.stopRequested(), EARLY_LOOKS_MS[earlyLooks++]!);
      continue;
    }
    const woken = await condition(() => ctx.capacity.changed || ctx.stopRequested() || ctx.handOverDue(), recheckMs);
    // A whole re-check period without capacity anywhere else: give avoided nodes another chance.
    if (!woken) state.avoidNodes = [];
  }
}

/**
 * From the start of a run: whenever this replica is not looking for GPUs and holds wake-ups,
 * it passes them on. Wake-ups that came while it was placing were meant for GPUs it may not have
 * taken (whoever freed them read visibility before this replica left Unschedulable); two
 * releases at once both name the oldest waiter. Costs nothing until a wake-up comes.
 */
export function forwardUnusedWakes(ctx: ReplicaContext): void {
  void (async () => {
    for (;;) {
      await condition(() => !ctx.capacity.placing && ctx.capacity.woken.length > 0);
      const nodeIds = [...new Set(ctx.capacity.woken)];
      ctx.capacity.woken = [];
      ctx.capacity.changed = false;
      await Promise.all(
        nodeIds.map((nodeId) =>
          control(`pass on the wake-up for ${nodeId}`)
            .wakeWaiters({ nodeId, exclude: [ctx.replicaId] })
            .catch(() => undefined),
        ),
      );
    }
  })();
}
