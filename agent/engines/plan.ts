// Reads a StartShard into what every engine builder needs, and refuses the ones that can
// never start. Agent side: a refusal is a non-retryable InvalidSpec, because starting the
// same spec again cannot succeed and would only hold GPUs while it fails.
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../common/failures.js';
import { Launcher, type EngineProfile, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { EngineContext } from './types.js';

export type LauncherName = 'native' | 'ray';

export interface ShardPlan {
  spec: StartShard;
  profile: EngineProfile;
  rank: number;
  nnodes: number;
  tensorParallel: number;
  pipelineParallel: number;
  launcher: LauncherName;
  /** host:port of rank 0 (Ray head, SGLang dist-init, fake leader); set when nnodes > 1. */
  leader: string | undefined;
  /** Always set on rank 0; on other ranks only when the agent chose one. */
  httpPort: number | undefined;
}

export function shardLabel(spec: StartShard): string {
  return `shard ${spec.shardId || '(no id)'} of replica ${spec.replicaId || '(no id)'}`;
}

export function invalidSpec(spec: StartShard, problem: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(`${shardLabel(spec)}: ${problem}`, FailureType.InvalidSpec);
}

/** host:port, with IPv6 literals bracketed so the port cannot be read as part of the address. */
export function hostPort(host: string, port: number): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
}

export function requireProfile(spec: StartShard): EngineProfile {
  if (!spec.profile) throw invalidSpec(spec, 'the spec carries no engine profile');
  return spec.profile;
}

function isPort(n: number): boolean {
  return Number.isInteger(n) && n >= 1 && n <= 65535;
}

function launcherName(spec: StartShard, launcher: Launcher): LauncherName {
  switch (launcher) {
    // Unset means native: a single-node profile never names a launcher, and SGLang's own
    // multi-node flags need nothing else.
    case Launcher.UNSPECIFIED:
    case Launcher.NATIVE:
      return 'native';
    case Launcher.RAY:
      return 'ray';
    default: {
      const unknown: never = launcher;
      throw invalidSpec(spec, `unknown launcher ${String(unknown)}; valid launchers: native, ray`);
    }
  }
}

// Proto3 cannot tell an unset count from 0, and a parallel size or node count of 0 means
// nothing, so 0 reads as 1: what the engines themselves assume when the flag is absent.
function countOrOne(n: number): number {
  return n === 0 ? 1 : n;
}

export function planShard(spec: StartShard, profile: EngineProfile, ctx: EngineContext): ShardPlan {
  if (profile.modelSource.trim() === '') throw invalidSpec(spec, `profile ${profile.name} has an empty model source`);
  if (profile.servedName.trim() === '') throw invalidSpec(spec, `profile ${profile.name} has an empty served name`);

  const nnodes = countOrOne(spec.nnodes);
  if (profile.nodes > 0 && profile.nodes !== nnodes) {
    throw invalidSpec(spec, `the replica has ${nnodes} node(s) but profile ${profile.name} needs ${profile.nodes}`);
  }
  if (spec.rank >= nnodes) throw invalidSpec(spec, `rank ${spec.rank} is out of range for ${nnodes} node(s)`);

  // Handing an engine more or fewer GPUs than its parallelism expects either fails late,
  // after minutes of loading, or leaves GPUs held and idle.
  if (profile.gpusPerNode > 0 && spec.gpuIndices.length !== profile.gpusPerNode) {
    throw invalidSpec(
      spec,
      `profile ${profile.name} needs ${profile.gpusPerNode} GPU(s) per node but the shard was given ${spec.gpuIndices.length} [${spec.gpuIndices.join(',')}]`,
    );
  }

  let leader: string | undefined;
  if (nnodes > 1) {
    if (spec.leaderAddress.trim() === '') throw invalidSpec(spec, `a ${nnodes}-node replica needs a leader address`);
    if (!isPort(spec.leaderPort)) throw invalidSpec(spec, `a ${nnodes}-node replica needs a leader port, got ${spec.leaderPort}`);
    leader = hostPort(spec.leaderAddress, spec.leaderPort);
  }

  let httpPort: number | undefined;
  if (isPort(ctx.httpPort)) httpPort = ctx.httpPort;
  else if (spec.rank === 0) throw invalidSpec(spec, `rank 0 serves HTTP and needs a port, got ${ctx.httpPort}`);

  return {
    spec,
    profile,
    rank: spec.rank,
    nnodes,
    tensorParallel: countOrOne(profile.tensorParallel),
    pipelineParallel: countOrOne(profile.pipelineParallel),
    launcher: launcherName(spec, profile.launcher),
    leader,
    httpPort,
  };
}

/** For builders: rank 0's port, which planShard guarantees. */
export function leaderHttpPort(plan: ShardPlan): number {
  if (plan.httpPort === undefined) throw invalidSpec(plan.spec, 'rank 0 serves HTTP and needs a port');
  return plan.httpPort;
}

/** For builders of multi-node launches: the leader, which planShard guarantees when nnodes > 1. */
export function leaderAddress(plan: ShardPlan): string {
  if (plan.leader === undefined) throw invalidSpec(plan.spec, `a ${plan.nnodes}-node replica needs a leader address`);
  return plan.leader;
}
