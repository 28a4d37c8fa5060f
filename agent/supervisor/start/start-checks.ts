// What the agent checks of a start's placement before it writes a spec or spawns anything:
// the GPUs are ours to hand out and held by no other live shard, and a port the request
// names is inside the agent's range. Agent side. Placement is signed by the control worker
// (agent/placement-ticket.ts); these checks hold even against a ticket placement got wrong:
// they are facts only this host knows (which GPUs it manages, which shards run now).
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../../common/failures.js';
import type { StartShard } from '../../../proto/gen/llmgw/v1/shard_pb.js';
import type { SupervisorCore } from '../core.js';
import type { Shard } from '../shard.js';
import { startsAbleToSleep } from '../../sleep.js';

/** Ports below this are the host's services (ssh, …): never an engine's, whatever the range says. */
export const FIRST_UNPRIVILEGED_PORT = 1024;

/** Every reason this start must not run here ([] when it may). */
export function placementProblems(core: SupervisorCore, spec: StartShard, existing: Shard | undefined): string[] {
  const problems: string[] = [];
  const gpus = spec.gpuIndices;
  const managed = core.options.managedGpus;
  if (new Set(gpus).size !== gpus.length) problems.push(`GPUs ${gpus.join(',')} name a GPU twice`);
  const unmanaged = managed === undefined ? [] : gpus.filter((gpu) => !managed.includes(gpu));
  if (unmanaged.length > 0) {
    problems.push(`GPU ${unmanaged.join(',')} is not managed by this agent (it manages ${managed?.join(',') || 'none'})`);
  }
  // Engines able to sleep may share GPUs: only as many are awake as fit (docs/sleep.md).
  const sleeper = startsAbleToSleep(spec);
  for (const other of core.shards.values()) {
    if (other === existing || other.spec.shardId === spec.shardId || other.exited) continue;
    const shared = gpus.filter((gpu) => other.spec.gpuIndices.includes(gpu));
    if (shared.length > 0 && !(sleeper && startsAbleToSleep(other.spec))) {
      problems.push(`GPU ${shared.join(',')} is held by shard ${other.spec.shardId}, which is still running`);
    }
    if (spec.httpPort !== 0 && other.record.httpPort === spec.httpPort) {
      problems.push(`port ${spec.httpPort} is held by shard ${other.spec.shardId}`);
    }
  }
  for (const gpu of gpus) {
    const holder = core.reservedGpus.get(gpu);
    const shareable = sleeper && holder !== undefined && core.reservedSleepers.has(holder);
    if (holder !== undefined && holder !== spec.shardId && !shareable)
      problems.push(`GPU ${gpu} is being given to shard ${holder}, starting now`);
  }
  problems.push(...portProblems(core, 'httpPort', spec.httpPort));
  // Rank 0 listens on its rendezvous port; other ranks' leaderPort is the leader's, on its host.
  if (spec.rank === 0) problems.push(...portProblems(core, 'leaderPort', spec.leaderPort));
  // The leader's host and port range are not this agent's, but a leader on a privileged port is
  // the remote host's own service, never an engine's (the ticket fixes the leader's address).
  else if (spec.leaderPort !== 0 && spec.leaderPort < FIRST_UNPRIVILEGED_PORT) {
    problems.push(`leaderPort ${spec.leaderPort} is a privileged port of the leader's host`);
  }
  return problems;
}

function portProblems(core: SupervisorCore, field: string, port: number): string[] {
  if (port === 0) return [];
  const { from, to } = core.options.portRange;
  if (port < FIRST_UNPRIVILEGED_PORT) return [`${field} ${port} is a privileged port`];
  if (port < from || port > to) return [`${field} ${port} is outside this agent's --port-range ${from}-${to}`];
  return [];
}

/**
 * Throws the non-retryable PlacementRefused failure naming every problem (nothing has been
 * written yet); otherwise reserves the GPUs for this start and returns their release.
 */
export function checkPlacement(core: SupervisorCore, spec: StartShard, existing: Shard | undefined): () => void {
  const problems = placementProblems(core, spec, existing);
  if (problems.length === 0) {
    // Checked and reserved in one synchronous step: no other start can pass in between.
    const reserved = spec.gpuIndices.filter((gpu) => !core.reservedGpus.has(gpu));
    for (const gpu of reserved) core.reservedGpus.set(gpu, spec.shardId);
    const sleeper = startsAbleToSleep(spec);
    if (sleeper) core.reservedSleepers.add(spec.shardId);
    return () => {
      for (const gpu of reserved) if (core.reservedGpus.get(gpu) === spec.shardId) core.reservedGpus.delete(gpu);
      if (sleeper) core.reservedSleepers.delete(spec.shardId);
    };
  }
  core.log(`refused shard ${spec.shardId} of ${spec.replicaId}: ${problems.join('; ')}`, 'warn');
  throw ApplicationFailure.nonRetryable(
    `agent ${core.nodeId} refused shard ${spec.shardId} of ${spec.replicaId}: ${problems.join('; ')}`,
    FailureType.PlacementRefused,
    { shardId: spec.shardId, problems },
  );
}
