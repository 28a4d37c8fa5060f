// Profile snapshots and tracked replicas for the tests of a deployment's rollout
// (workflows/deploy-model/rollout.ts): a revision made from the fields a test names, and a
// replica of it as the deploy-model workflow tracks it.
import type { ProfileSnapshot } from '../../common/replica-types.js';
import { revisionOf } from '../../common/revision.js';
import type { TrackedReplica } from '../../workflows/deploy-model/state.js';

export const NOW = '2026-12-03T12:00:00.000Z';

/** A one-GPU fake-engine snapshot with the fields a test names, carrying the revision they make. */
export function snapshotOf(fields: Partial<ProfileSnapshot>): ProfileSnapshot & { revision: string } {
  const snapshot: ProfileSnapshot = {
    model: 'm',
    modelSource: 's',
    servedName: 'm',
    profile: 'p',
    engine: 'fake',
    launcher: 'native',
    gpuClass: 'H100',
    tensorParallel: 1,
    pipelineParallel: 1,
    gpusPerNode: 1,
    nodes: 1,
    args: [],
    env: {},
    startupTimeoutSeconds: 30,
    minGpuMemoryMib: 0,
    ...fields,
  };
  return { ...snapshot, revision: revisionOf(snapshot) };
}

/** What a replica holds before its placement has reported: no nodes, GPUs, endpoint or shards. */
const UNREPORTED = { nodes: [], gpus: [], endpoint: '', shards: [], placements: 1, restarts: 0 };

/** Replica number `seq` of a revision, Ready since NOW with nothing reported unless `fields` says otherwise. */
export function trackedReplica(seq: number, revision: string, fields: Partial<TrackedReplica> = {}): TrackedReplica {
  return {
    replicaId: `replica/d/${seq}`,
    seq,
    phase: 'Ready',
    reason: '',
    ...UNREPORTED,
    since: NOW,
    stopping: false,
    revision,
    ...fields,
  };
}
