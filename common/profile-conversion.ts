// The one place where a replica's ProfileSnapshot (domain, plain JSON) becomes the
// wire's EngineProfile and StartShard. Safe to import from workflows.
import { create } from '@bufbuild/protobuf';
import {
  Engine,
  EngineProfileSchema,
  Launcher,
  StartShardSchema,
  type EngineProfile,
  type StartShard,
} from '../proto/gen/llmgw/v1/shard_pb.js';
import type { EnvValue, ProfileSnapshot, ShardPlacement } from './replica-types.js';

/** Each engine's wire value; engineFromWire reads the same table backwards. */
const ENGINE_TO_WIRE: Record<ProfileSnapshot['engine'], Engine> = {
  vllm: Engine.VLLM,
  sglang: Engine.SGLANG,
  fake: Engine.FAKE,
  llamacpp: Engine.LLAMACPP,
};

const ENGINE_FROM_WIRE: Partial<Record<number, ProfileSnapshot['engine']>> = Object.fromEntries(
  Object.entries(ENGINE_TO_WIRE).map(([engine, wire]) => [wire, engine as ProfileSnapshot['engine']]),
);

const LAUNCHER_TO_WIRE: Record<ProfileSnapshot['launcher'], Launcher> = { native: Launcher.NATIVE, ray: Launcher.RAY };

/** The wire keeps literal values and host references apart: a reference is only a name. */
function splitEnv(env: Record<string, EnvValue>): { literal: Record<string, string>; fromHost: Record<string, string> } {
  const literal: Record<string, string> = {};
  const fromHost: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (typeof value === 'string') literal[name] = value;
    else fromHost[name] = value.fromHost;
  }
  return { literal, fromHost };
}

export function engineProfileFromSnapshot(snapshot: ProfileSnapshot): EngineProfile {
  const env = splitEnv(snapshot.env);
  return create(EngineProfileSchema, {
    name: snapshot.profile,
    engine: ENGINE_TO_WIRE[snapshot.engine],
    modelSource: snapshot.modelSource,
    servedName: snapshot.servedName,
    gpuClass: snapshot.gpuClass,
    tensorParallel: snapshot.tensorParallel,
    pipelineParallel: snapshot.pipelineParallel,
    gpusPerNode: snapshot.gpusPerNode,
    nodes: snapshot.nodes,
    args: snapshot.args,
    env: env.literal,
    envFromHost: env.fromHost,
    startupTimeoutSeconds: snapshot.startupTimeoutSeconds,
    minGpuMemoryMib: snapshot.minGpuMemoryMib,
    launcher: LAUNCHER_TO_WIRE[snapshot.launcher],
    model: snapshot.model,
    signature: snapshot.signature ?? '',
  });
}

// Engines from before the field (UNSPECIFIED) were vLLM.
function engineFromWire(engine: Engine): ProfileSnapshot['engine'] {
  return ENGINE_FROM_WIRE[engine] ?? 'vllm';
}

/**
 * The snapshot a running engine was started from, read back from its spec. Reconciliation
 * rebuilds a lost replica with exactly what runs, not with what the catalog says today.
 */
export function snapshotFromEngineProfile(profile: EngineProfile): ProfileSnapshot {
  const env: Record<string, EnvValue> = { ...profile.env };
  for (const [name, hostName] of Object.entries(profile.envFromHost)) env[name] = { fromHost: hostName };
  const snapshot: ProfileSnapshot = {
    model: profile.model,
    modelSource: profile.modelSource,
    servedName: profile.servedName,
    profile: profile.name,
    engine: engineFromWire(profile.engine),
    launcher: profile.launcher === Launcher.RAY ? 'ray' : 'native',
    gpuClass: profile.gpuClass,
    tensorParallel: profile.tensorParallel,
    pipelineParallel: profile.pipelineParallel,
    gpusPerNode: profile.gpusPerNode,
    nodes: profile.nodes,
    args: [...profile.args],
    env,
    startupTimeoutSeconds: profile.startupTimeoutSeconds,
    minGpuMemoryMib: profile.minGpuMemoryMib,
  };
  // Adopted engines keep the signature they were started with (a rebuilt replica restarts them with it).
  if (profile.signature !== '') snapshot.signature = profile.signature;
  return snapshot;
}

export interface StartShardContext {
  replicaId: string;
  deployment: string;
  snapshot: ProfileSnapshot;
  shards: ShardPlacement[];
  leaderPort: number;
  /** Rank 0's agent's signature over `leaderPort` (its startShard answer), for the worker ranks. */
  leaderAttestation?: string;
}

export function startShardFor(shard: ShardPlacement, context: StartShardContext): StartShard {
  const leader = context.shards.find((s) => s.rank === 0) ?? shard;
  return create(StartShardSchema, {
    replicaId: context.replicaId,
    shardId: shard.shardId,
    deployment: context.deployment,
    rank: shard.rank,
    nnodes: context.shards.length,
    leaderAddress: context.shards.length > 1 ? leader.managementAddress : '',
    leaderPort: context.shards.length > 1 ? context.leaderPort : 0,
    gpuIndices: shard.gpuIndices,
    hcas: shard.hcas,
    httpPort: 0,
    profile: engineProfileFromSnapshot(context.snapshot),
    startupTimeoutSeconds: context.snapshot.startupTimeoutSeconds,
    nodeId: shard.nodeId,
    notifyWorkflowId: context.replicaId,
    placementTicket: shard.ticket ?? '',
    leaderAttestation: shard.rank > 0 ? (context.leaderAttestation ?? '') : '',
  });
}
