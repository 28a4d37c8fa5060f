// The replica's Ready step: only transitions arrive (an engine exit from its agent, a node's
// NotReady/Ready/Lost from its node workflow), as signals; steady state costs nothing. The
// asleep step (sleep.ts) reads the same events the same way. Workflow side.
import { condition } from '@temporalio/workflow';
import { ShardState } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { ReplicaContext, ReplicaEvent } from './context.js';
import { endpointOf, isExitOf, type Outcome } from './state.js';

/** What one event means for a replica whose engines run (awake or asleep). */
export type EventMeaning =
  | { kind: 'failure'; outcome: Exclude<Outcome, { kind: 'stop' | 'fail' }> }
  | { kind: 'unreachable'; nodeId: string; reason: string }
  | { kind: 'back'; nodeId: string }
  | undefined;

export function meaningOf(ctx: ReplicaContext, event: ReplicaEvent): EventMeaning {
  const { state } = ctx;
  if (event.kind === 'shard') {
    if (!isExitOf(event.status, state.shards) && event.status.state !== ShardState.FAILED) return undefined;
    const shard = state.shards.find((s) => s.shardId === event.status.shardId);
    if (!shard || (event.status.pid && shard.pid && event.status.pid !== shard.pid)) return undefined; // an older process of this shard
    return {
      kind: 'failure',
      outcome: { kind: 'restart', reason: `rank ${shard.rank} on ${shard.nodeId}: ${event.status.message || 'engine failed'}` },
    };
  }
  const { nodeId, phase, reason, at } = event.status;
  if (!state.shards.some((s) => s.nodeId === nodeId)) return undefined;
  // Signals from one node can arrive out of order: the newest word on a node wins.
  if (at && (state.nodeSeen[nodeId] ?? '') > at) return undefined;
  if (at) state.nodeSeen[nodeId] = at;
  if (phase === 'NotReady') return { kind: 'unreachable', nodeId, reason };
  if (phase === 'Ready') return { kind: 'back', nodeId };
  if (phase === 'Lost') {
    return {
      kind: 'failure',
      outcome: { kind: 'replace', reason: `node ${nodeId} lost: ${reason}`, nodeId, agentGone: true, nodeLost: true },
    };
  }
  return undefined;
}

/**
 * Returns what ended Ready: a failure, a stop, a sleep its sleepReplica Update asked for, or
 * 'handOver' when the history is long and nothing is queued.
 */
export async function watchReady(ctx: ReplicaContext): Promise<Outcome | 'handOver' | 'sleep'> {
  const { state, events } = ctx;
  for (;;) {
    await condition(() => events.length > 0 || ctx.stopRequested() || ctx.sleep.sleep !== undefined || ctx.handOverDue());
    if (ctx.stopRequested()) return { kind: 'stop' };
    // Before anything else queued: its Update waits, and a hand-over waits for its Update.
    if (ctx.sleep.sleep) return 'sleep';
    const event = events.shift();
    // Hand over only with nothing queued: queued events do not cross continue-as-new.
    if (!event) return 'handOver';
    const meaning = meaningOf(ctx, event);
    if (meaning?.kind === 'failure') return meaning.outcome;
    if (meaning?.kind === 'unreachable') {
      void ctx.setPhase(
        'Unknown',
        `agent on ${meaning.nodeId} unreachable (${meaning.reason}); the engine keeps its traffic while it answers`,
      );
    } else if (meaning?.kind === 'back' && state.phase === 'Unknown') {
      void ctx.setPhase('Ready', `agent on ${meaning.nodeId} is back; serving at ${endpointOf(state.shards)}`);
    }
  }
}
