// The one conversion between the wire's ShardState enum and the domain's shard states.
// Safe to import from workflows.
import { ShardState } from '../proto/gen/llmgw/v1/shard_pb.js';

export type ShardPhase = 'Pending' | 'Starting' | 'Loading' | 'Ready' | 'Draining' | 'Stopped' | 'Failed';

/** Each phase's wire state: both directions come from this one table. */
const PHASE_TO_WIRE: Record<ShardPhase, ShardState> = {
  Pending: ShardState.PENDING,
  Starting: ShardState.STARTING,
  Loading: ShardState.LOADING,
  Ready: ShardState.READY,
  Draining: ShardState.DRAINING,
  Stopped: ShardState.STOPPED,
  Failed: ShardState.FAILED,
};

const PHASE_FROM_WIRE: Partial<Record<number, ShardPhase>> = Object.fromEntries(
  Object.entries(PHASE_TO_WIRE).map(([phase, state]) => [state, phase as ShardPhase]),
);

// An unrecognised state is treated as Failed rather than guessed at: a newer agent
// reporting something this control plane does not understand must not be mistaken
// for a healthy shard.
export function shardPhaseFromWire(state: ShardState | number): ShardPhase {
  return PHASE_FROM_WIRE[state] ?? 'Failed';
}

export function shardPhaseToWire(phase: ShardPhase): ShardState {
  return PHASE_TO_WIRE[phase];
}
