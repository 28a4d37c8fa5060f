// The supervisor's in-memory view of one shard, and its one conversion to the wire's
// ShardStatus and RunningShard. Agent side.
import { create } from '@bufbuild/protobuf';
import {
  RunningShardSchema,
  ShardState,
  ShardStatusSchema,
  type RunningShard,
  type ShardStatus,
  type StartShard,
} from '../../proto/gen/llmgw/v1/shard_pb.js';
import { hostPort } from '../engines/plan.js';
import type { ProcessRole } from '../engines/types.js';
import type { ProcessExit } from './processes/launcher.js';
import type { ShardRecord } from './spec-store.js';

export type { ProcessExit } from './processes/launcher.js';

export interface ShardProcess {
  role: ProcessRole;
  pid: number;
  startTicks: string;
  pgid: number;
  /** Only for processes this agent launched: adopted ones are not our children. */
  exit?: ProcessExit;
  /** Resolves when a process this agent launched has been reaped (its exit status is known). */
  exited?: Promise<void>;
}

export interface Shard {
  spec: StartShard;
  record: ShardRecord;
  logFile: string;
  procs: ShardProcess[];
  state: ShardState;
  /** A blocking process has exited: the shard has failed for good. */
  exited: boolean;
  exitCode?: number;
  signal: string;
  message: string;
  /** At most one redacted line (logs.ts failureLogLines): never the log itself. */
  lastLogLines: string[];
  adopted: boolean;
  /** A stop is in progress: exits are expected and are not failures. */
  stopping: boolean;
  /** Consecutive failed health probes while Ready (or unhealthy). */
  healthFailures: number;
  /** When the last process was spawned or adopted (ms since epoch); worker ranks are Ready 1 s later. */
  runningSince?: number;
  timer?: NodeJS.Timeout;
  /** Aborted by stop() so that a start still waiting (for Ray) gives up. */
  startAbort: AbortController;
}

/** The process that stands for the shard: the engine when there is one, else the first. */
export function mainProcess(shard: Shard): ShardProcess | undefined {
  return shard.procs.find((p) => p.role === 'engine') ?? shard.procs[0];
}

export function shardStatus(shard: Shard, nodeId: string, advertiseAddress: string): ShardStatus {
  const main = mainProcess(shard);
  const port = shard.record.httpPort;
  const status = create(ShardStatusSchema, {
    shardId: shard.spec.shardId,
    replicaId: shard.spec.replicaId,
    nodeId,
    state: shard.state,
    pid: main?.pid ?? 0,
    httpPort: port,
    endpoint: shard.record.launch.servesHttp && port > 0 ? hostPort(advertiseAddress, port) : '',
    signal: shard.signal,
    lastLogLines: shard.state === ShardState.FAILED ? shard.lastLogLines : [],
    message: shard.message,
    rank: shard.spec.rank,
    gpuIndices: [...shard.spec.gpuIndices],
    leaderPort: shard.spec.rank === 0 && shard.spec.nnodes > 1 ? shard.spec.leaderPort : 0,
  });
  if (shard.exitCode !== undefined) status.exitCode = shard.exitCode;
  return status;
}

export function runningShard(shard: Shard, nodeId: string, advertiseAddress: string): RunningShard {
  return create(RunningShardSchema, {
    spec: shard.spec,
    status: shardStatus(shard, nodeId, advertiseAddress),
    startTicks: mainProcess(shard)?.startTicks ?? '',
    adopted: shard.adopted,
  });
}

export function describeExit(role: ProcessRole, pid: number, exit: ProcessExit): string {
  if (exit.signal) return `${role} (pid ${pid}) was killed by ${exit.signal}`;
  return `${role} (pid ${pid}) exited with code ${exit.code ?? 'unknown'}`;
}

export interface ExitDetails {
  shardId: string;
  exitCode: number | null;
  signal: string;
  lastLogLines: string[];
}

/** The details of an EngineExited failure, for workflows to read without parsing the message. */
export function exitDetails(shard: Shard): ExitDetails {
  return { shardId: shard.spec.shardId, exitCode: shard.exitCode ?? null, signal: shard.signal, lastLogLines: shard.lastLogLines };
}

/** Where an operator reads a failed shard's whole log: the CLI, through the agent's admin API. */
export function logsHint(spec: StartShard, nodeId: string): string {
  const replica = spec.replicaId.replace(/^replica\//, '');
  const rank = spec.rank > 0 ? ` --rank ${spec.rank}` : '';
  return `the engine's log stays on node ${nodeId}: \`llmgw logs ${replica}${rank}\``;
}
