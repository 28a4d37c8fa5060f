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
import type { ReplicaContext } from './context.js';
import type { Next } from './steps.js';

/** How long a replica waits for an unreachable agent before it tries the stop again. */
const STOP_RETRY_MS = 30_000;

/** Stops the given shards (worker ranks first); returns the ids whose stop the agent did not confirm. */
export async function stopShards(
  ctx: ReplicaContext,
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
      }).stopShard(create(StopShardSchema, { shardId: shard.shardId, replicaId: ctx.replicaId, graceSeconds: 10, reason }));
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
function lostNodes(ctx: ReplicaContext): string[] {
  return ctx.events.filter((e) => e.kind === 'node' && e.status.phase === 'Lost').map((e) => (e.kind === 'node' ? e.status.nodeId : ''));
}

/**
 * The release step: stops every shard and releases the GPUs of those confirmed stopped,
 * retrying the others until their agent answers or their node is Lost, then goes on to `then`.
 * Interruptible by a hand-over: the shards still held are in the state the next run resumes from.
 */
export async function release(ctx: ReplicaContext, next: Extract<Next, { step: 'release' }>): Promise<Next> {
  const { reason, phase } = next;
  const { state } = ctx;
  for (;;) {
    const unconfirmed = await stopShards(ctx, reason, state.shards);
    const stopped = state.shards.filter((s) => !unconfirmed.includes(s.shardId));
    await releaseShards(stopped);
    const lost = lostNodes(ctx);
    state.shards = state.shards.filter((s) => unconfirmed.includes(s.shardId) && !lost.includes(s.nodeId));
    if (!state.shards.length) return next.then;
    const waiting = state.shards.map((s) => `${s.shardId} on ${s.nodeId}`).join(', ');
    void ctx.setPhase(phase, `${reason}; waiting for the agent to confirm ${waiting} stopped: its GPUs stay held until then`);
    const nodes = state.shards.map((s) => s.nodeId);
    // Only news that arrives from now on counts: older word on these nodes was already acted on.
    for (let i = ctx.events.length - 1; i >= 0; i--) {
      const e = ctx.events[i]!;
      if (e.kind === 'node' && nodes.includes(e.status.nodeId) && e.status.phase !== 'Lost') ctx.events.splice(i, 1);
    }
    await condition(
      () =>
        ctx.handOverDue() || ctx.events.some((e) => e.kind === 'node' && nodes.includes(e.status.nodeId) && e.status.phase !== 'NotReady'),
      STOP_RETRY_MS,
    );
    if (ctx.handOverDue()) return { step: 'handOver', resume: next };
  }
}

/**
 * The drain step waits for work, never a fixed sleep: the route is withdrawn first (and the
 * routers confirm it), then the leader's agent watches the engine's own in-flight count and
 * tells the replica when it is idle; at the drain timeout the engine is stopped whatever is in
 * flight. Interruptible by a hand-over: the deadline is in the state, and the next run asks again.
 */
export async function drain(ctx: ReplicaContext): Promise<Next> {
  const { state, input } = ctx;
  const stopped: Next = { step: 'done', phase: 'Stopped', reason: state.stopReason ?? 'stopped' };
  if (!state.shards.length) return stopped;
  const limits = { graceMs: (input.drainGraceSeconds ?? 5) * 1000, timeoutMs: (input.drainTimeoutSeconds ?? 600) * 1000 };
  const reason = state.stopReason ?? 'stop requested';
  state.drainUntil ??= new Date(Date.now() + limits.timeoutMs).toISOString();
  await ctx.setPhase('Draining', `${reason}; route withdrawn, waiting for requests in flight (until ${state.drainUntil})`);
  await awaitRouters(`awaitReplicaRouted: every router has dropped ${ctx.replicaId}`)
    .awaitReplicaRouted({ replicaId: ctx.replicaId, routed: false })
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
        create(DrainShardSchema, { shardId: leader.shardId, replicaId: ctx.replicaId, timeoutSeconds: Math.ceil(remainingMs() / 1000) }),
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
    ctx.events.some(
      (e) =>
        e.kind === 'shard' &&
        e.status.shardId === leader?.shardId &&
        ((e.status.state === ShardState.DRAINING && e.status.requestsInFlight === 0) ||
          e.status.state === ShardState.STOPPED ||
          e.status.state === ShardState.FAILED),
    );
  if (inFlight !== 0) {
    void ctx.setPhase(
      'Draining',
      `${reason}; route withdrawn, ${inFlight > 0 ? `${inFlight} request(s) in flight` : 'in-flight count unknown'}, stopping when idle or at ${new Date(until).toISOString()}`,
    );
    for (let left = until - Date.now(); left > 0 && !idle(); left = until - Date.now()) {
      await condition(() => idle() || ctx.handOverDue(), left);
      if (!idle() && ctx.handOverDue()) return { step: 'handOver', resume: { step: 'drain' } };
    }
  }
  return { step: 'release', reason: idle() || inFlight === 0 ? `${reason}; drained` : reason, phase: 'Draining', then: stopped };
}
