// The Markdown a replica shows in the Web UI as its current details: the state and
// the reason in words an operator understands, and where each rank runs.
import type { ProfileSnapshot } from '../../common/replica-types.js';
import type { ReplicaState } from './state.js';

export function replicaDetails(
  replicaId: string,
  profile: ProfileSnapshot,
  state: Pick<ReplicaState, 'phase' | 'since' | 'reason' | 'placements' | 'restarts' | 'avoidNodes' | 'shards'>,
): string {
  const lines = [
    `**${replicaId}** — **${state.phase}** since ${state.since}`,
    '',
    state.reason,
    '',
    `${profile.model} (${profile.profile}: ${profile.engine}, TP${profile.tensorParallel}×PP${profile.pipelineParallel} on ${profile.nodes > 1 ? `${profile.nodes} × ` : ''}${profile.gpusPerNode} ${profile.gpuClass})`,
    `placements ${state.placements}, restarts ${state.restarts}${state.avoidNodes.length ? `, avoiding ${state.avoidNodes.join(', ')}` : ''}`,
  ];
  if (state.shards.length) {
    lines.push('', '| rank | state | node | GPUs | HCAs | port | pid |', '| --- | --- | --- | --- | --- | --- | --- |');
    for (const shard of state.shards) {
      lines.push(
        `| ${shard.rank} | ${shard.state ?? '—'} | ${shard.nodeId} | ${shard.gpuIndices.join(',')} | ${shard.hcas.join(',') || '—'} | ${shard.httpPort || '—'} | ${shard.pid || '—'} |`,
      );
    }
  }
  return lines.join('\n');
}
