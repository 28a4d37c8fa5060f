// The replica's start and load steps: startShard on each rank's host (rank 0 first, since its agent
// chooses the rendezvous port the others are given), then waitHealthy on the leader and each
// worker rank. Startup is never fire-and-forget. Workflow side.
import { CancellationScope, condition, isCancellation } from '@temporalio/workflow';
import { create } from '@bufbuild/protobuf';
import { WaitHealthySchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { startShardFor } from '../../common/profile-conversion.js';
import { agent, control } from './calls.js';
import type { ReplicaContext, ReplicaEvent } from './context.js';
import { endpointOf, failureOutcome, gpuRange, isExitOf, type Outcome } from './state.js';

/**
 * The shards' placement tickets signed again for this run's chain, now: an agent starts a new
 * engine only on a fresh ticket of the chain that sends it, and routes are signed only for the
 * live chain (activities/placement-tickets.ts). Adopted engines keep their GPUs and get tickets of
 * the chain that adopted them. A refusal is an outcome like any failed start.
 */
export async function renewTickets(ctx: ReplicaContext): Promise<Outcome | undefined> {
  const { state } = ctx;
  if (!state.shards.some((s) => s.ticket)) return undefined;
  try {
    state.shards = await control('renew placement tickets').renewTickets({ shards: state.shards });
    return undefined;
  } catch (error) {
    return failureOutcome(error, state.shards[0]?.nodeId ?? '', 'renewing placement tickets');
  }
}

export async function startAndWait(ctx: ReplicaContext): Promise<Outcome | 'ready'> {
  const { state, events } = ctx;
  events.length = 0;
  const refused = await renewTickets(ctx);
  if (refused) return refused;
  let leaderPort = 0;
  let leaderAttestation = '';
  for (const shard of [...state.shards].sort((a, b) => a.rank - b.rank)) {
    void ctx.setPhase('Starting', `startShard rank ${shard.rank} on ${shard.nodeId}, GPUs ${shard.gpuIndices.join(',')}`);
    // A host whose agent is known to be gone for good (Lost) does not get to run out a start
    // timeout. A NotReady one may be an agent restarting mid-start: the retried startShard
    // reaches the new agent, which finds the spec and starts the engine exactly once.
    const startScope = new CancellationScope();
    const nodeDown = (): boolean => events.some((e) => e.kind === 'node' && e.status.nodeId === shard.nodeId && e.status.phase === 'Lost');
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
            replicaId: ctx.replicaId,
            deployment: ctx.input.deployment,
            snapshot: ctx.profile,
            shards: state.shards,
            leaderPort: shard.rank === 0 ? 0 : leaderPort,
            ...(shard.rank === 0 ? {} : { leaderAttestation }),
          }),
        ),
      );
      shard.httpPort = running.status?.httpPort ?? 0;
      // An earlier engine's attestation names its port, not this one's: waitHealthy brings the new one.
      delete shard.attestation;
      shard.pid = running.status?.pid ?? 0;
      shard.state = 'Starting';
      if (shard.rank === 0) leaderPort = running.status?.leaderPort ?? 0;
      // Its agent's signature over that port: worker ranks join only the port it names.
      if (shard.rank === 0) leaderAttestation = running.status?.leaderAttestation ?? '';
      startDone = true;
    } catch (error) {
      startDone = true;
      if (nodeDown() && isCancellation(error)) {
        return {
          kind: 'replace',
          reason: `the agent on ${shard.nodeId} became unreachable during startShard`,
          nodeId: shard.nodeId,
          agentGone: true,
        };
      }
      return failureOutcome(error, shard.nodeId, `starting rank ${shard.rank} on ${shard.nodeId}`);
    }
  }
  return awaitHealthy(
    ctx,
    `waiting for ${endpointOf(state.shards)} to be healthy (startup timeout ${ctx.profile.startupTimeoutSeconds} s)`,
  );
}

/** The leader's health decides; a worker rank that exits meanwhile fails the whole replica. */
export async function awaitHealthy(ctx: ReplicaContext, why: string): Promise<Outcome | 'ready'> {
  const { state, events, profile } = ctx;
  const leader = state.shards.find((s) => s.rank === 0);
  if (!leader) return { kind: 'replace', reason: 'no rank 0 among its shards', nodeId: state.shards[0]?.nodeId ?? '', agentGone: false };
  void ctx.setPhase('Loading', why);
  const scope = new CancellationScope();
  // Heartbeats as startShard's do: a task handed to a poller whose connection then died (a
  // lossy link to Temporal) is found lost in one heartbeat timeout and tried again, not 30 s.
  const healthy = scope.run(() =>
    agent(leader.nodeId, {
      summary: `waitHealthy rank 0 on ${leader.nodeId}`,
      startToCloseSeconds: profile.startupTimeoutSeconds + 60,
      heartbeatSeconds: 10,
    }).waitHealthy(create(WaitHealthySchema, { shardId: leader.shardId, timeoutSeconds: profile.startupTimeoutSeconds })),
  );
  const workerExited = (): boolean => events.some((e) => e.kind === 'shard' && isExitOf(e.status, state.shards) && e.status.rank !== 0);
  void condition(() => ctx.stopRequested() || workerExited()).then(() => scope.cancel());
  try {
    const ready = await healthy;
    // The agent's signed word on where the engine listens (the route signer checks it); kept
    // only when there is one, so that a replica of an older agent carries none.
    if (ready.endpointAttestation) leader.attestation = ready.endpointAttestation;
    leader.state = 'Ready';
    // The leader serves only once its group formed; each other rank is Ready once its
    // process is up (and, being in the group, joined).
    for (const shard of state.shards.filter((s) => s.rank !== 0)) {
      await scope.run(() =>
        agent(shard.nodeId, {
          summary: `waitHealthy rank ${shard.rank} on ${shard.nodeId}`,
          startToCloseSeconds: 120,
          heartbeatSeconds: 10,
        }).waitHealthy(create(WaitHealthySchema, { shardId: shard.shardId, timeoutSeconds: 60 })),
      );
      shard.state = 'Ready';
    }
    // The leader's agent just answered: what it was said to be before (NotReady during an
    // agent restart, say) is history.
    for (let i = events.length - 1; i >= 0; i--) {
      const e = events[i]!;
      if (e.kind === 'node' && e.status.nodeId === leader.nodeId && e.status.phase === 'NotReady') events.splice(i, 1);
    }
    return 'ready';
  } catch (error) {
    if (ctx.stopRequested()) return { kind: 'stop' };
    const workerExit = events.find(
      (e): e is Extract<ReplicaEvent, { kind: 'shard' }> => e.kind === 'shard' && isExitOf(e.status, state.shards),
    );
    if (workerExit && isCancellation(error))
      return { kind: 'restart', reason: `rank ${workerExit.status.rank} exited while loading: ${workerExit.status.message}` };
    return failureOutcome(error, leader.nodeId, `loading on ${leader.nodeId}`);
  }
}
