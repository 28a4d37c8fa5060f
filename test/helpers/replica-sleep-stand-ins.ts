// The stand-ins test/e2e/replica-sleep.test.ts runs the replica workflow against: control
// activities (placement, the node's wake permits, the holders asked to sleep) and the agent's
// shard activities on the node's queue, each recording what it was asked.
import { ApplicationFailure } from '@temporalio/activity';
import type { ProfileSnapshot, ShardPlacement } from '../../common/replica-types.js';
import type { SleepPolicy, SleepShardRequest, WakeShardRequest } from '../../common/sleep-types.js';
import { sleep } from './processes.js';
import { snapshotOf } from './rollout.js';

export const NODE = 'sleepy-node';
export const WAKE_MS = 300;

/** What the stand-in agent was asked, in order. */
export const calls: string[] = [];
/** What the stand-in node was told: wake permits asked, shares given back. */
export const permits: string[] = [];
/** The stand-in node's GPU: how many permits it still refuses, naming which awake holders. */
export const gpu: { full: number; holders: { replicaId: string; shardIds: string[]; awakeSince: string }[]; busyUntil?: string } = {
  full: 0,
  holders: [],
};
export const sleepAsks: { replicaId: string; by: string }[] = [];
export const stopAsks: { replicaId: string; asleepSeconds: number }[] = [];
/** A test's knobs: the next rank-1 sleep refused; how long each engine takes to fall asleep. */
/** And the next rank-1 wake failing as a wake onto a full GPU does (the agent's WakeOutOfMemory). */
export const standIn = { failNextSleep: false, sleepMs: 0, wakeOutOfMemory: false };

export const controlActivities = {
  async placeReplica(request: { replicaId: string; attempt: number }) {
    const shards: ShardPlacement[] = [0, 1].map((rank) => ({
      rank,
      nodeId: NODE,
      shardId: `${request.replicaId.replace(/\//g, '.')}.r${rank}.a${request.attempt}`,
      gpuIndices: [rank],
      hcas: [],
      managementAddress: '127.0.0.1',
      httpPort: 0,
      pid: 0,
    }));
    return { ok: true, shards };
  },
  releaseGpus: async () => true,
  wakeWaiters: async () => 0,
  awaitReplicaRouted: async () => true,
  // Hand-overs: no catalog key here, so nothing is sealed (as on a control worker without one).
  sealCarriedState: async () => undefined,
  openCarriedState: async () => ({ ok: true, how: 'unkeyed' }),
  // Each wake asks its node for room and each sleep gives it back (awake-permits.ts): granted,
  // unless a test makes the GPU full (`full`: refusals left, naming `holders`).
  async askAwake(request: { shards: { shardId: string }[]; awake: boolean }) {
    for (const shard of request.shards) permits.push(`${request.awake ? 'permit' : 'asleep'} ${shard.shardId.slice(-5)}`);
    if (!request.awake || gpu.full <= 0) return request.shards.map(() => ({ ok: true }));
    gpu.full--;
    return request.shards.map(() => ({ ok: false, reason: 'GPU 0 is full', holders: gpu.holders }));
  },
  // The holder asked to sleep: refuses once for minAwakeSeconds when `busyUntil` is set.
  async askToSleepFor(request: { replicaId: string; by: string }) {
    sleepAsks.push(request);
    const until = gpu.busyUntil;
    gpu.busyUntil = undefined;
    return until ? { slept: false, why: `stays awake: ask again after ${until}, or with force`, askAgainAt: until } : { slept: true };
  },
  async askToStopSleeper(request: { replicaId: string; asleepSeconds: number }) {
    stopAsks.push(request);
    return { asked: true, why: '' };
  },
};

let pids = 1000;
export const agentActivities = {
  async startShard(spec: { shardId: string }) {
    calls.push(`start ${spec.shardId.slice(-5)}`);
    return { status: { httpPort: 18000, pid: ++pids } };
  },
  waitHealthy: async () => ({}),
  async stopShard(request: { shardId: string }) {
    calls.push(`stop ${request.shardId.slice(-5)}`);
    return {};
  },
  drainShard: async () => ({ requestsInFlight: 0 }),
  async sleepShard(request: SleepShardRequest) {
    calls.push(`sleep ${request.shardId.slice(-5)} level ${request.level}`);
    if (request.shardId.includes('.r1.') && standIn.failNextSleep) {
      standIn.failNextSleep = false;
      throw ApplicationFailure.nonRetryable('engine refused to sleep', 'EngineRefused');
    }
    await sleep(standIn.sleepMs);
    return { shardId: request.shardId, level: request.level, tookMs: 5 };
  },
  async wakeShard(request: WakeShardRequest) {
    calls.push(`wake ${request.shardId.slice(-5)}`);
    if (request.shardId.includes('.r1.') && standIn.wakeOutOfMemory) {
      standIn.wakeOutOfMemory = false;
      throw ApplicationFailure.nonRetryable('CUDA out of memory. Tried to allocate 900 MiB.', 'WakeOutOfMemory');
    }
    await sleep(WAKE_MS);
    return { shardId: request.shardId, tookMs: WAKE_MS };
  },
  shardSleepState: async (request: { shardId: string }) => ({ shardId: request.shardId, sleeping: false }),
};

/** The demo profile the test's replicas run, with a sleep policy when given (no revision: as a hand-started replica's). */
export function profile(sleepPolicy?: SleepPolicy): ProfileSnapshot {
  const { revision: _revision, ...snapshot } = snapshotOf({
    model: 'demo',
    modelSource: 'engine://demo',
    servedName: 'demo',
    profile: 'fake',
    gpuClass: 'fake',
    ...(sleepPolicy ? { sleep: sleepPolicy } : {}),
  });
  return snapshot;
}
