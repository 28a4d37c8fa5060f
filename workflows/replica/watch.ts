// The replica's Ready step: only transitions arrive (an engine exit from its agent, a node's
// NotReady/Ready/Lost from its node workflow), as signals; steady state costs nothing.
// Workflow side.
import { condition } from '@temporalio/workflow';
import { ShardState } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { ReplicaContext } from './context.js';
import { endpointOf, isExitOf, type Outcome } from './state.js';

/** Returns what ended Ready, or 'handOver' when the history is long and nothing is queued. */
export async function watchReady(ctx: ReplicaContext): Promise<Outcome | 'handOver'> {
  const { state, events } = ctx;
  for (;;) {
    await condition(() => events.length > 0 || ctx.stopRequested() || ctx.handOverDue());
    if (ctx.stopRequested()) return { kind: 'stop' };
    const event = events.shift();
    // Hand over only with nothing queued: queued events do not cross continue-as-new.
    if (!event) return 'handOver';
    if (event.kind === 'shard') {
      if (!isExitOf(event.status, state.shards) && event.status.state !== ShardState.FAILED) continue;
      const shard = state.shards.find((s) => s.shardId === event.status.shardId);
      if (!shard || (event.status.pid && shard.pid && event.status.pid !== shard.pid)) continue; // an older process of this shard
      return { kind: 'restart', reason: `rank ${shard.rank} on ${shard.nodeId}: ${event.status.message || 'engine failed'}` };
    }
    const { nodeId, phase, reason, at } = event.status;
    if (!state.shards.some((s) => s.nodeId === nodeId)) continue;
    // Signals from one node can arrive out of order: the newest word on a node wins.
    if (at && (state.nodeSeen[nodeId] ?? '') > at) continue;
    if (at) state.nodeSeen[nodeId] = at;
    if (phase === 'NotReady') {
      void ctx.setPhase('Unknown', `agent on ${nodeId} unreachable (${reason}); the engine keeps its traffic while it answers`);
    } else if (phase === 'Ready' && state.phase === 'Unknown') {
      void ctx.setPhase('Ready', `agent on ${nodeId} is back; serving at ${endpointOf(state.shards)}`);
    } else if (phase === 'Lost') {
      return { kind: 'replace', reason: `node ${nodeId} lost: ${reason}`, nodeId, agentGone: true, nodeLost: true };
    }
  }
}
