// The replica workflow's state (one plain object that crosses continue-as-new) and the pure
// helpers that read it: the view its deployment and the CLI see, the endpoint, the outcome of
// a failed step. Workflow side; no commands here.
import { ActivityFailure, ApplicationFailure, isCancellation, TimeoutFailure } from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import type { ReplicaInput, ReplicaPhase, ReplicaView, ShardPlacement } from '../../common/replica-types.js';
import type { SleepView } from '../../common/sleep-types.js';
import { ShardState, type ShardStatus } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { Next } from './steps.js';

export interface ReplicaState {
  phase: ReplicaPhase;
  reason: string;
  since: string;
  shards: ShardPlacement[];
  placements: number;
  /** Placements abandoned because the engine kept failing there (not because a host vanished). */
  failedPlacements: number;
  restartsHere: number;
  restarts: number;
  avoidNodes: string[];
  stopReason: string | undefined;
  /** The time of the newest nodeStatus seen per node: signals from one node can arrive out of order. */
  nodeSeen: Record<string, string>;
  /** While Draining: when the engine is stopped whatever is still in flight. */
  drainUntil?: string;
  /** Set at a hand-over: the step the next run resumes with (steps.ts). */
  resume?: Next;
  /** Its sleep (workflows/replica/sleep.ts): absent until it first sleeps. */
  sleep?: ReplicaSleep;
}

/** What `llmgw status` shows, and when this sleep asked its deployment to stop it (once per sleep). */
export interface ReplicaSleep extends SleepView {
  stopAskedAt?: string;
}

export type Outcome =
  | { kind: 'stop' }
  | { kind: 'restart'; reason: string }
  /** nodeLost: its node workflow declared it Lost (its grace ran out; its GPUs are already released). */
  | { kind: 'replace'; reason: string; nodeId: string; agentGone: boolean; nodeLost?: boolean }
  /** Can never succeed as given (an agent refused the revision): Failed at once, no retries. */
  | { kind: 'fail'; reason: string };

export function initialReplicaState(input: ReplicaInput, now: string): ReplicaState {
  return {
    phase: 'Pending',
    reason: 'waiting to be placed',
    since: now,
    shards: input.adopt ?? [],
    // Later placements get shard ids the adopted engines never had.
    placements: Math.max(0, ...(input.adopt ?? []).map((s) => Number(/\.a(\d+)$/.exec(s.shardId)?.[1] ?? 1))),
    failedPlacements: 0,
    restartsHere: 0,
    restarts: 0,
    avoidNodes: [],
    stopReason: undefined,
    nodeSeen: {},
  };
}

/** State carried by an earlier run, of this release or the one before (fields added since get defaults). */
export function carriedReplicaState(carried: unknown): ReplicaState {
  const state = carried as Partial<ReplicaState> & Pick<ReplicaState, 'phase' | 'reason' | 'since' | 'shards'>;
  return {
    placements: 0,
    failedPlacements: 0,
    restartsHere: 0,
    restarts: 0,
    avoidNodes: [],
    stopReason: undefined,
    ...state,
    nodeSeen: state.nodeSeen ?? {},
  };
}

export function replicaView(replicaId: string, seq: number, state: ReplicaState, revision?: string): ReplicaView {
  return {
    ...(revision ? { revision } : {}),
    replicaId,
    seq,
    phase: state.phase,
    reason: state.reason,
    nodes: [...new Set(state.shards.map((s) => s.nodeId))],
    gpus: state.shards.map((s) => `${s.nodeId}:${s.gpuIndices.join(',')}`),
    endpoint: endpointOf(state.shards),
    shards: state.shards,
    placements: state.placements,
    restarts: state.restarts,
    since: state.since,
    ...(state.sleep ? { sleep: sleepViewOf(state.sleep) } : {}),
  };
}

function sleepViewOf(sleep: ReplicaSleep): SleepView {
  return {
    ...(sleep.since ? { since: sleep.since } : {}),
    ...(sleep.level ? { level: sleep.level } : {}),
    ...(sleep.lastWake ? { lastWake: sleep.lastWake } : {}),
  };
}

export function endpointOf(shards: ShardPlacement[]): string {
  const leader = shards.find((s) => s.rank === 0);
  return leader && leader.httpPort ? `http://${leader.managementAddress || '127.0.0.1'}:${leader.httpPort}` : '';
}

export function isExitOf(status: ShardStatus, shards: ShardPlacement[]): boolean {
  const shard = shards.find((s) => s.shardId === status.shardId);
  if (!shard) return false;
  if (status.pid && shard.pid && status.pid !== shard.pid) return false;
  return status.state === ShardState.FAILED || status.state === ShardState.STOPPED;
}

/** What a failed start, load or health check means for the replica. */
export function failureOutcome(error: unknown, nodeId: string, what: string): Outcome {
  if (isCancellation(error)) throw error;
  const cause = error instanceof ActivityFailure ? error.cause : error;
  if (cause instanceof TimeoutFailure) {
    return {
      kind: 'replace',
      reason: `${what}: the agent did not answer (${cause.timeoutType === 'SCHEDULE_TO_START' ? 'no agent polling its queue' : 'timed out'})`,
      nodeId,
      agentGone: true,
    };
  }
  if (cause instanceof ApplicationFailure) {
    switch (cause.type) {
      case FailureType.EngineExited:
      case FailureType.StartupTimeout:
        return { kind: 'restart', reason: `${what}: ${firstLine(cause.message)}` };
      case FailureType.UnsignedRevision:
        return { kind: 'fail', reason: `${what}: ${firstLine(cause.message)}` };
      case FailureType.HostEnvMissing:
      case FailureType.PlacementRefused:
      case FailureType.InvalidSpec:
      case FailureType.SpecConflict:
      case FailureType.NoFreePort:
      case FailureType.StateDirUnwritable:
        return { kind: 'replace', reason: `${what}: ${firstLine(cause.message)}`, nodeId, agentGone: false };
      default:
        return { kind: 'restart', reason: `${what}: ${firstLine(cause.message)}` };
    }
  }
  return { kind: 'restart', reason: `${what}: ${firstLine(cause instanceof Error ? cause.message : String(cause))}` };
}

export function gpuRange(indices: number[]): string {
  const sorted = [...indices].sort((a, b) => a - b);
  const contiguous = sorted.every((value, i) => i === 0 || value === sorted[i - 1]! + 1);
  return contiguous && sorted.length > 2 ? `${sorted[0]}–${sorted[sorted.length - 1]}` : sorted.join(',');
}

/** The first line of a failure and, when it quotes a log, its last line: what an operator needs. */
export function firstLine(text: string): string {
  const lines = text
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const head = (lines[0] ?? text).replace(/;?\s*last log lines:\s*$/, '');
  const last = lines.length > 1 ? lines[lines.length - 1] : undefined;
  return last ? `${head} — ${last}` : head;
}
