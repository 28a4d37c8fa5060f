// Stopping a replica's engines and giving back their GPUs. A release never outruns the
// process: GPUs are released only once the agent confirms the engine's process group is
// gone. While an agent is unreachable the replica keeps them (and says why); a node that
// turns Lost drops its allocations itself, and reconciliation stops a surviving engine when
// its agent returns. Workflow side.
import { condition, log } from '@temporalio/workflow';
import { create } from '@bufbuild/protobuf';
import { DrainShardSchema, ShardState, StopShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { ShardPlacement } from '../../common/replica-types.js';
import { agent, control } from './calls.js';
import { awaitRouters } from '../routes/await.js';
import type { ReplicaRun } from './run.js';

/** How long a replica waits for an unreachable agent before it tries the stop again. */
const STOP_RETRY_MS = 30_000;

/** Stops the given shards (worker ranks first); returns the ids whose stop the agent did not confirm. */
export async function stopShards(
  run: ReplicaRun,
  reason: string,
  shards: ShardPlacement[],
  options: { quick?: boolean } = {},
): Promise<string[]> {
  const unconfirmed: string[] = [];
  // Worker ranks first, the leader last: the leader's exit would only make the others fail.
  for (const shard of [...shards].sort((a, b) => b.rank - a.rank)) {
    try {
      await agent(shard.nodeId, {
        summary: `stopShard rank ${shard.rank} on ${shard.nodeId}`,
        startToCloseSeconds: options.quick ? 30 : 90,
        heartbeatSeconds: 20,
        quick: options.quick,
      }).stopShard(create(StopShardSchema, { shardId: shard.shardId, replicaId: run.replicaId, graceSeconds: 10, reason }));
    } catch (error) {
      log.warn(`stopShard ${shard.shardId} failed: ${String(error)}`);
      unconfirmed.push(shard.shardId);
    }
  }
  return unconfirmed;
}

export async function releaseShards(shards: ShardPlacement[]): Promise<void> {
  for (const shard of shards) {
    await control(`release GPUs ${shard.gpuIndices.join(',')} on ${shard.nodeId}`).releaseGpus({
      nodeId: shard.nodeId,
      shardId: shard.shardId,
    });
  }
}

/** Nodes a node workflow reported Lost since these events began: their GPUs are already free. */
function lostNodes(run: ReplicaRun): string[] {
  return run.events.filter((e) => e.kind === 'node' && e.status.phase === 'Lost').map((e) => (e.kind === 'node' ? e.status.nodeId : ''));
}

/**
 * Stops every shard and releases the GPUs of those confirmed stopped, retrying the others
 * until their agent answers or their node is Lost. Interruptible by a hand-over: the shards
 * still held are in the state the next run resumes from.
 */
export async function stopAndRelease(run: ReplicaRun, reason: string, phase: 'Draining' | 'Starting' | 'Placing'): Promise<void> {
  const { state } = run;
  for (;;) {
    const unconfirmed = await stopShards(run, reason, state.shards);
    const stopped = state.shards.filter((s) => !unconfirmed.includes(s.shardId));
    await releaseShards(stopped);
    const lost = lostNodes(run);
    state.shards = state.shards.filter((s) => unconfirmed.includes(s.shardId) && !lost.includes(s.nodeId));
    if (!state.shards.length) return;
    const waiting = state.shards.map((s) => `${s.shardId} on ${s.nodeId}`).join(', ');
    void run.setPhase(phase, `${reason}; waiting for the agent to confirm ${waiting} stopped: its GPUs stay held until then`);
    const nodes = state.shards.map((s) => s.nodeId);
    // Only news that arrives from now on counts: older word on these nodes was already acted on.
    for (let i = run.events.length - 1; i >= 0; i--) {
      const e = run.events[i]!;
      if (e.kind === 'node' && nodes.includes(e.status.nodeId) && e.status.phase !== 'Lost') run.events.splice(i, 1);
    }
    await condition(
      () =>
        run.handOverDue() || run.events.some((e) => e.kind === 'node' && nodes.includes(e.status.nodeId) && e.status.phase !== 'NotReady'),
      STOP_RETRY_MS,
    );
    if (run.handOverDue()) await run.handOver();
  }
}

/**
 * Draining waits for work, never a fixed sleep: the route is withdrawn first (and the routers
 * confirm it), then the leader's agent watches the engine's own in-flight count and tells the
 * replica when it is idle; at the drain timeout the engine is stopped whatever is in flight.
 * Interruptible by a hand-over: the deadline is in the state, and the next run asks again.
 */
export async function drain(run: ReplicaRun, limits: { graceMs: number; timeoutMs: number }): Promise<void> {
  const { state } = run;
  if (!state.shards.length) return;
  const reason = state.stopReason ?? 'stop requested';
  state.drainUntil ??= new Date(Date.now() + limits.timeoutMs).toISOString();
  await run.setPhase('Draining', `${reason}; route withdrawn, waiting for requests in flight (until ${state.drainUntil})`);
  await awaitRouters(`awaitReplicaRouted: every router has dropped ${run.replicaId}`)
    .awaitReplicaRouted({ replicaId: run.replicaId, routed: false })
    .catch((error: unknown) => log.warn(`routers did not confirm the withdrawal: ${String(error)}`));
  const leader = state.shards.find((s) => s.rank === 0);
  const remainingMs = (): number => Date.parse(state.drainUntil!) - Date.now();
  let inFlight = -1;
  if (leader && remainingMs() > 0) {
    const result = await agent(leader.nodeId, {
      summary: `drainShard rank 0 on ${leader.nodeId}: wait for requests in flight`,
      startToCloseSeconds: 30,
    })
      .drainShard(
        create(DrainShardSchema, { shardId: leader.shardId, replicaId: run.replicaId, timeoutSeconds: Math.ceil(remainingMs() / 1000) }),
      )
      .catch((error: unknown) => {
        log.warn(`drainShard failed: ${String(error)}`);
        return undefined;
      });
    inFlight = result?.requestsInFlight ?? -1;
  }
  // An engine whose load cannot be read gets the old fixed grace, within the timeout.
  const until = inFlight < 0 ? Math.min(Date.parse(state.drainUntil), Date.now() + limits.graceMs) : Date.parse(state.drainUntil);
  const idle = (): boolean =>
    run.events.some(
      (e) =>
        e.kind === 'shard' &&
        e.status.shardId === leader?.shardId &&
        ((e.status.state === ShardState.DRAINING && e.status.requestsInFlight === 0) ||
          e.status.state === ShardState.STOPPED ||
          e.status.state === ShardState.FAILED),
    );
  if (inFlight !== 0) {
    void run.setPhase(
      'Draining',
      `${reason}; route withdrawn, ${inFlight > 0 ? `${inFlight} request(s) in flight` : 'in-flight count unknown'}, stopping when idle or at ${new Date(until).toISOString()}`,
    );
    for (let left = until - Date.now(); left > 0 && !idle(); left = until - Date.now()) {
      await condition(() => idle() || run.handOverDue(), left);
      if (!idle() && run.handOverDue()) await run.handOver();
    }
  }
  await stopAndRelease(run, idle() || inFlight === 0 ? `${reason}; drained` : reason, 'Draining');
}
