// The rules of reconciliation, as one pure function: given what an agent reports running
// and what Temporal and the catalog say about it, which shards to adopt, rebuild or
// stop, and which GPU allocations the node must hold. Level-triggered: it looks only at
// the present, so the same facts always give the same plan, and a plan that has been
// carried out plans nothing the next time.
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { ShardState, type RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { deploymentWorkflowId, parseReplicaWorkflowId } from '../../common/names.js';
import { snapshotFromEngineProfile } from '../../common/profile-conversion.js';
import type { Allocation } from '../../common/node-types.js';
import { restoredSharing } from '../node/shared-gpus.js';
import type { ShardPlacement } from '../../common/replica-types.js';
import type { ReconcileAction, ReconcileFacts, ReconcilePlan, ReplicaFacts } from '../../common/reconcile-types.js';

/** A reservation younger than this may belong to a placement still in flight. */
export const ALLOCATION_GRACE_MS = 60_000;

const MISSING: ReplicaFacts = { replica: 'missing', deployment: 'missing' };

/** An engine whose process is gone: only its record is left. */
export function isDead(shard: RunningShard): boolean {
  const status = shard.status;
  if (!status) return true;
  if (status.state === ShardState.STOPPED) return true;
  return status.state === ShardState.FAILED && (status.exitCode !== undefined || status.signal !== '');
}

export function catalogKey(model: string, profile: string): string {
  return `${model}/${profile}`;
}

export function planReconcile(report: Register, facts: ReconcileFacts): ReconcilePlan {
  const planning: Planning = {
    report,
    facts,
    actions: [],
    claims: [],
    releases: new Set(),
    unchanged: [],
    rebuilds: new Map(),
    held: new Map((facts.node?.allocations ?? []).map((allocation) => [allocation.shardId, allocation])),
  };
  for (const shard of report.runningShards) if (shard.spec) planShard(planning, shard);
  planReleases(planning);
  for (const process of report.unidentified) {
    planning.actions.push({
      kind: 'kill',
      pid: process.pid,
      gpuIndices: [...process.gpuIndices],
      command: process.command,
      reason: process.reason,
    });
  }
  const { actions, claims, releases, unchanged } = planning;
  return { actions, claims, releases: [...releases], unchanged };
}

/** A plan as it is being made. */
interface Planning {
  report: Register;
  facts: ReconcileFacts;
  actions: ReconcileAction[];
  claims: Allocation[];
  releases: Set<string>;
  unchanged: string[];
  /** One rebuild per lost replica, gathering its shards on this node. */
  rebuilds: Map<string, Extract<ReconcileAction, { kind: 'rebuild' }>>;
  /** What the node holds now, by shard. */
  held: Map<string, Allocation>;
}

/** One reported shard: left alone, adopted, rebuilt around, or stopped. */
function planShard(planning: Planning, shard: RunningShard): void {
  const spec = shard.spec!;
  const profile = spec.profile;
  const replica = planning.facts.replicas[spec.replicaId] ?? MISSING;
  const dead = isDead(shard);
  const inCatalog = profile ? (planning.facts.catalog[catalogKey(profile.model, profile.name)] ?? true) : false;
  const stop = (reason: string, stopReplica = false, tellDeployment?: string): void =>
    planStop(planning, shard, reason, stopReplica, tellDeployment);

  if (!inCatalog) {
    const why = profile ? `model ${profile.model} profile ${profile.name} is no longer in the catalog` : 'its spec names no profile';
    return stop(why, replica.replica === 'running');
  }
  if (replica.replica === 'running' && replica.revoked) {
    // Withdrawn from every router already and never restarted; now stopped, and the replica ends
    // saying why rather than coming back (facts gathered before revocation carry no `revoked`).
    const deployment = spec.deployment;
    return stop(
      `revoked: ${replica.revoked}; its engines are stopped. Roll deployment ${deployment} to a live revision (llmgw rollout ${deployment}) or undeploy it`,
      true,
    );
  }
  if (replica.replica === 'closed') {
    // A replica that ends normally reports Stopped to its deployment first; one whose
    // shard is still here may have been terminated, and its deployment may still count
    // it. Telling is harmless when it does not: the deployment ignores finished replicas.
    const tell = replica.deployment === 'running' ? deploymentWorkflowId(spec.deployment) : undefined;
    return stop(`its replica workflow ${spec.replicaId} has closed`, false, tell);
  }
  if (replica.replica === 'running') {
    const view = replica.view;
    // The replica did not answer: decide next time rather than guess.
    if (!view) return void planning.unchanged.push(spec.shardId);
    if (view.shards.some((s) => s.shardId === spec.shardId)) {
      const needsClaim = dead ? false : claim(planning, shard);
      // A sleeping replica's engine is up too: one found dead is news to it.
      const thinksServing = view.phase === 'Ready' || view.phase === 'Unknown' || view.phase === 'Sleeping';
      if (!needsClaim && !(dead && thinksServing)) return void planning.unchanged.push(spec.shardId);
      planning.actions.push({
        kind: 'adopt',
        replicaId: spec.replicaId,
        shardId: spec.shardId,
        gpuIndices: [...spec.gpuIndices],
        reason: dead
          ? `its engine exited (${shard.status?.message || 'no status'}); the replica is told`
          : `running on GPUs ${spec.gpuIndices.join(',')} and expected by its replica; the node did not hold them`,
      });
      return;
    }
    const other = view.shards.find((s) => s.rank === spec.rank);
    return stop(
      other
        ? `rank ${spec.rank} of ${spec.replicaId} is served by shard ${other.shardId}`
        : `${spec.replicaId} (${view.phase}) does not expect it`,
    );
  }

  // The replica workflow does not exist: Temporal lost it.
  if (dead) return stop(`its engine exited and its replica workflow ${spec.replicaId} is gone`);
  if (replica.deployment === 'closed') return stop(`its replica workflow is gone and its deployment ${spec.deployment} has ended`);
  const parsed = parseReplicaWorkflowId(spec.replicaId);
  if (!parsed || !profile) return stop(`its replica workflow is gone and ${spec.replicaId} is not a replica id it could be rebuilt under`);
  claim(planning, shard);
  planRebuild(planning, shard, parsed, replica.deployment === 'missing');
}

/** A running engine whose replica workflow is gone: its replica (and deployment) are rebuilt around it. */
function planRebuild(
  planning: Planning,
  shard: RunningShard,
  parsed: { deployment: string; seq: number },
  rebuildDeployment: boolean,
): void {
  const spec = shard.spec!;
  const { report } = planning;
  const placement: ShardPlacement = {
    rank: spec.rank,
    nodeId: report.nodeId,
    shardId: spec.shardId,
    gpuIndices: [...spec.gpuIndices],
    hcas: [...spec.hcas],
    managementAddress: report.managementAddress,
    httpPort: shard.status?.httpPort ?? 0,
    pid: shard.status?.pid ?? 0,
    // The engine's ticket stays valid for a replica rebuilt under the same workflow id.
    ...(spec.placementTicket ? { ticket: spec.placementTicket } : {}),
  };
  const existing = planning.rebuilds.get(spec.replicaId);
  if (existing) return void existing.shards.push(placement);
  const rebuild: Extract<ReconcileAction, { kind: 'rebuild' }> = {
    kind: 'rebuild',
    replicaId: spec.replicaId,
    deployment: parsed.deployment,
    seq: parsed.seq,
    snapshot: snapshotFromEngineProfile(spec.profile!),
    shards: [placement],
    rebuildDeployment,
    pool: spec.pool,
    reason: `engine pid ${placement.pid} serves ${spec.replicaId}, whose workflow is gone${rebuildDeployment ? ` (and so is deployment/${parsed.deployment})` : ''}; rebuilt in adopt mode`,
  };
  planning.rebuilds.set(spec.replicaId, rebuild);
  planning.actions.push(rebuild);
}

/** Allocations no reported engine backs: free those nothing will use. */
function planReleases(planning: Planning): void {
  const { report, facts } = planning;
  const reported = new Set(report.runningShards.map((s) => s.spec?.shardId ?? ''));
  const checkedAt = Date.parse(facts.checkedAt);
  for (const allocation of facts.node?.allocations ?? []) {
    if (reported.has(allocation.shardId) || planning.releases.has(allocation.shardId)) continue;
    const replica = facts.replicas[allocation.replicaId] ?? MISSING;
    let reason: string | undefined;
    if (replica.replica !== 'running')
      reason = `no engine runs shard ${allocation.shardId} and its replica workflow is ${replica.replica === 'closed' ? 'closed' : 'gone'}`;
    else if (
      replica.view &&
      !replica.view.shards.some((s) => s.shardId === allocation.shardId) &&
      checkedAt - Date.parse(allocation.since) > ALLOCATION_GRACE_MS
    ) {
      reason = `no engine runs shard ${allocation.shardId} and ${allocation.replicaId} no longer uses it`;
    }
    if (!reason) continue;
    planning.releases.add(allocation.shardId);
    const { replicaId, shardId, gpuIndices } = allocation;
    planning.actions.push({ kind: 'release', replicaId, shardId, gpuIndices: [...gpuIndices], reason });
  }
}

/** The node must hold this shard's GPUs; true when it does not hold them now. */
function claim(planning: Planning, shard: RunningShard): boolean {
  const spec = shard.spec!;
  planning.claims.push({
    shardId: spec.shardId,
    replicaId: spec.replicaId,
    gpuIndices: [...spec.gpuIndices],
    hcas: [...spec.hcas],
    since: planning.facts.checkedAt,
    via: 'claim',
    // An engine able to sleep shares its GPUs, asleep as it said (docs/sleep.md, "Sharing GPUs").
    ...restoredSharing(shard, planning.facts.checkedAt),
  });
  const current = planning.held.get(spec.shardId);
  return !current || !sameSet(current.gpuIndices, spec.gpuIndices);
}

function planStop(planning: Planning, shard: RunningShard, reason: string, stopReplica: boolean, tellDeployment?: string): void {
  const spec = shard.spec!;
  planning.actions.push({
    kind: 'stop',
    replicaId: spec.replicaId,
    shardId: spec.shardId,
    gpuIndices: [...spec.gpuIndices],
    pid: shard.status?.pid ?? 0,
    stopReplica,
    reason,
    ...(tellDeployment ? { tellDeployment } : {}),
  });
  planning.releases.add(spec.shardId);
}

function sameSet(a: number[], b: number[]): boolean {
  return a.length === b.length && a.every((value) => b.includes(value));
}
