// The Markdown a replica shows in the Web UI as its current details: the state and
// the reason in words an operator understands, its sleep, and where each rank runs.
import type { ProfileSnapshot } from '../../common/replica-types.js';
import type { ReplicaState } from './state.js';

/** Asleep since when and at which level, and the last wake with its duration: as `llmgw status` shows them. */
function sleepLine(state: Pick<ReplicaState, 'phase' | 'sleep'>, profile: ProfileSnapshot): string | undefined {
  const { sleep } = state;
  const asleep = state.phase === 'Sleeping' && sleep?.since ? `asleep since ${sleep.since} at level ${sleep.level ?? '?'}` : '';
  const last = sleep?.lastWake ? `last woken ${sleep.lastWake.at} by ${sleep.lastWake.by} in ${sleep.lastWake.tookMs} ms` : '';
  const policy = profile.sleep
    ? `sleep policy: level ${profile.sleep.level} after ${profile.sleep.afterSeconds} s idle, awake at least ${profile.sleep.minAwakeSeconds} s${profile.sleep.stopAfterSeconds !== undefined ? `, stopped after ${profile.sleep.stopAfterSeconds} s asleep` : ''}`
    : '';
  const parts = [asleep, last, policy].filter(Boolean);
  return parts.length ? parts.join(' · ') : undefined;
}

export function replicaDetails(
  replicaId: string,
  profile: ProfileSnapshot,
  state: Pick<ReplicaState, 'phase' | 'since' | 'reason' | 'placements' | 'restarts' | 'avoidNodes' | 'shards' | 'sleep'>,
): string {
  const lines = [
    `**${replicaId}** — **${state.phase}** since ${state.since}`,
    '',
    state.reason,
    '',
    `${profile.model} (${profile.profile}: ${profile.engine}, TP${profile.tensorParallel}×PP${profile.pipelineParallel} on ${profile.nodes > 1 ? `${profile.nodes} × ` : ''}${profile.gpusPerNode} ${profile.gpuClass})`,
    `placements ${state.placements}, restarts ${state.restarts}${state.avoidNodes.length ? `, avoiding ${state.avoidNodes.join(', ')}` : ''}`,
  ];
  const sleep = sleepLine(state, profile);
  if (sleep) lines.push(sleep);
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
