// The node-local activities an agent serves on its task queue `agent/<nodeId>`, as a
// type that workflows import (type only) to call them.
import type { SleepActivities } from '../common/sleep-types.js';
import type { FetchWeightsInput, FetchWeightsResult } from './weights/activity.js';
import type { RemoveWeightsInput, RemoveWeightsResult } from './weights/remove.js';
import type { DrainShard, DrainShardResult } from '../proto/gen/llmgw/v1/shard_pb.js';
import type { KillProcesses, KillProcessesResult, Register } from '../proto/gen/llmgw/v1/register_pb.js';
import type { RunningShard, ShardStatus, StartShard, StopShard, StopShardResult, WaitHealthy } from '../proto/gen/llmgw/v1/shard_pb.js';

export interface PresenceInput {
  nodeId: string;
  heartbeatSeconds: number;
  /**
   * false when the node workflow only handed over to a new run and already holds a fresh
   * registration: the agent then does not register again (a registration starts a reconcile).
   */
  register?: boolean;
}

export interface ClearGpuFaultInput {
  gpuIndex: number;
}

/** sleepShard, wakeShard and shardSleepState come from SleepActivities (agent/sleep.ts, docs/sleep.md). */
export interface AgentActivities extends SleepActivities {
  /**
   * Makes a pinned revision's weights complete in this host's cache (once per host and
   * revision, resumable, verified), heartbeating its progress; agent/weights/.
   */
  fetchWeights(input: FetchWeightsInput): Promise<FetchWeightsResult>;
  /** `llmgw weights rm`: removes revisions no shard on the host uses; refuses, naming the shard, otherwise. */
  removeWeights(input: RemoveWeightsInput): Promise<RemoveWeightsResult>;
  /** Writes the spec, spawns the engine (idempotent by shard id), returns at once. */
  startShard(spec: StartShard): Promise<RunningShard>;
  /** SIGTERM, grace, SIGKILL; removes the spec once the whole process group is gone. */
  stopShard(request: StopShard): Promise<StopShardResult>;
  /** Heartbeats until the shard is Ready; fails with EngineExited or StartupTimeout. */
  waitHealthy(request: WaitHealthy): Promise<ShardStatus>;
  /** Heartbeats for as long as the agent lives; the node workflow's liveness signal. */
  presence(input: PresenceInput): Promise<void>;
  /** A fresh report of the host: inventory, health, running shards. */
  describe(): Promise<Register>;
  /**
   * Reconciliation's report: first kills every process the agent cannot identify (marked
   * with this node but described by no spec; on real GPUs, any compute process on a managed
   * GPU), then reports, naming what it killed since the last survey (recovery's kills too).
   */
  survey(): Promise<Register>;
  killProcesses(request: KillProcesses): Promise<KillProcessesResult>;
  /**
   * Watches the engine's in-flight requests locally and returns at once; the replica hears
   * the transition to idle as a shardTransition (DRAINING, requests_in_flight 0).
   */
  drainShard(request: DrainShard): Promise<DrainShardResult>;
  /** An operator returns a GPU the agent held out for a fault (`llmgw nodes clear-gpu`); the agent reports again. */
  clearGpuFault(input: ClearGpuFaultInput): Promise<{ cleared: boolean }>;
}
