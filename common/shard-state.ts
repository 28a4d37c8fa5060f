// The one conversion between the wire's ShardState enum and the domain's shard states.
// Safe to import from workflows.
import { ShardState } from '../proto/gen/llmgw/v1/shard_pb.js';

export type ShardPhase = 'Pending' | 'Starting' | 'Loading' | 'Ready' | 'Draining' | 'Stopped' | 'Failed';

// An unrecognised state is treated as Failed rather than guessed at: a newer agent
// reporting something this control plane does not understand must not be mistaken
// for a healthy shard.
export function shardPhaseFromWire(state: ShardState | number): ShardPhase {
  switch (state) {
    case ShardState.PENDING:
      return 'Pending';
    case ShardState.STARTING:
      return 'Starting';
    case ShardState.LOADING:
      return 'Loading';
    case ShardState.READY:
      return 'Ready';
    case ShardState.DRAINING:
      return 'Draining';
    case ShardState.STOPPED:
      return 'Stopped';
    case ShardState.FAILED:
    case ShardState.UNSPECIFIED:
    default:
      return 'Failed';
  }
}

export function shardPhaseToWire(phase: ShardPhase): ShardState {
  switch (phase) {
    case 'Pending':
      return ShardState.PENDING;
    case 'Starting':
      return ShardState.STARTING;
    case 'Loading':
      return ShardState.LOADING;
    case 'Ready':
      return ShardState.READY;
    case 'Draining':
      return ShardState.DRAINING;
    case 'Stopped':
      return ShardState.STOPPED;
    case 'Failed':
      return ShardState.FAILED;
  }
}
