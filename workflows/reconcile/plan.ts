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
  const actions: ReconcileAction[] = [];
  const claims: Allocation[] = [];
  const releases = new Set<string>();
  const unchanged: string[] = [];
  const rebuilds = new Map<string, Extract<ReconcileAction, { kind: 'rebuild' }>>();
  const held = new Map((facts.node?.allocations ?? []).map((allocation) => [allocation.shardId, allocation]));

  const claim = (shard: RunningShard): boolean => {
    const spec = shard.spec!;
    claims.push({
      shardId: spec.shardId,
      replicaId: spec.replicaId,
      gpuIndices: [...spec.gpuIndices],
      hcas: [...spec.hcas],
      since: facts.checkedAt,
      via: 'claim',
    });
    const current = held.get(spec.shardId);
    return !current || !sameSet(current.gpuIndices, spec.gpuIndices);
  };
  const stop = (shard: RunningShard, reason: string, stopReplica = false, tellDeployment?: string): void => {
    const spec = shard.spec!;
    actions.push({
      kind: 'stop',
      replicaId: spec.replicaId,
      shardId: spec.shardId,
      gpuIndices: [...spec.gpuIndices],
      pid: shard.status?.pid ?? 0,
      stopReplica,
      reason,
      ...(tellDeployment ? { tellDeployment } : {}),
    });
    releases.add(spec.shardId);
  };

  for (const shard of report.runningShards) {
    const spec = shard.spec;
    if (!spec) continue;
    const profile = spec.profile;
    const facts_ = facts.replicas[spec.replicaId] ?? MISSING;
    const dead = isDead(shard);
    const inCatalog = profile ? (facts.catalog[catalogKey(profile.model, profile.name)] ?? true) : false;

    if (!inCatalog) {
      stop(
        shard,
        profile ? `model ${profile.model} profile ${profile.name} is no longer in the catalog` : 'its spec names no profile',
        facts_.replica === 'running',
      );
      continue;
    }
    if (facts_.replica === 'closed') {
      // A replica that ends normally reports Stopped to its deployment first; one whose
      // shard is still here may have been terminated, and its deployment may still count
      // it. Telling is harmless when it does not: the deployment ignores finished replicas.
      const tell = facts_.deployment === 'running' ? deploymentWorkflowId(spec.deployment) : undefined;
      stop(shard, `its replica workflow ${spec.replicaId} has closed`, false, tell);
      continue;
    }
    if (facts_.replica === 'running') {
      const view = facts_.view;
      if (!view) {
        unchanged.push(spec.shardId);
        continue; // The replica did not answer: decide next time rather than guess.
      }
      if (view.shards.some((s) => s.shardId === spec.shardId)) {
        const needsClaim = dead ? false : claim(shard);
        const thinksServing = view.phase === 'Ready' || view.phase === 'Unknown';
        if (needsClaim || (dead && thinksServing)) {
          actions.push({
            kind: 'adopt',
            replicaId: spec.replicaId,
            shardId: spec.shardId,
            gpuIndices: [...spec.gpuIndices],
            reason: dead
              ? `its engine exited (${shard.status?.message || 'no status'}); the replica is told`
              : `running on GPUs ${spec.gpuIndices.join(',')} and expected by its replica; the node did not hold them`,
          });
        } else {
          unchanged.push(spec.shardId);
        }
        continue;
      }
      const other = view.shards.find((s) => s.rank === spec.rank);
      if (other) stop(shard, `rank ${spec.rank} of ${spec.replicaId} is served by shard ${other.shardId}`);
      else stop(shard, `${spec.replicaId} (${view.phase}) does not expect it`);
      continue;
    }

    // The replica workflow does not exist: Temporal lost it.
    if (dead) {
      stop(shard, `its engine exited and its replica workflow ${spec.replicaId} is gone`);
      continue;
    }
    if (facts_.deployment === 'closed') {
      stop(shard, `its replica workflow is gone and its deployment ${spec.deployment} has ended`);
      continue;
    }
    const parsed = parseReplicaWorkflowId(spec.replicaId);
    if (!parsed || !profile) {
      stop(shard, `its replica workflow is gone and ${spec.replicaId} is not a replica id it could be rebuilt under`);
      continue;
    }
    claim(shard);
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
    const existing = rebuilds.get(spec.replicaId);
    if (existing) {
      existing.shards.push(placement);
      continue;
    }
    const rebuild: Extract<ReconcileAction, { kind: 'rebuild' }> = {
      kind: 'rebuild',
      replicaId: spec.replicaId,
      deployment: parsed.deployment,
      seq: parsed.seq,
      snapshot: snapshotFromEngineProfile(profile),
      shards: [placement],
      rebuildDeployment: facts_.deployment === 'missing',
      pool: spec.pool,
      reason: `engine pid ${placement.pid} serves ${spec.replicaId}, whose workflow is gone${facts_.deployment === 'missing' ? ` (and so is deployment/${parsed.deployment})` : ''}; rebuilt in adopt mode`,
    };
    rebuilds.set(spec.replicaId, rebuild);
    actions.push(rebuild);
  }

  // Allocations no reported engine backs: free those nothing will use.
  const reported = new Set(report.runningShards.map((s) => s.spec?.shardId ?? ''));
  const checkedAt = Date.parse(facts.checkedAt);
  for (const allocation of facts.node?.allocations ?? []) {
    if (reported.has(allocation.shardId) || releases.has(allocation.shardId)) continue;
    const facts_ = facts.replicas[allocation.replicaId] ?? MISSING;
    let reason: string | undefined;
    if (facts_.replica !== 'running')
      reason = `no engine runs shard ${allocation.shardId} and its replica workflow is ${facts_.replica === 'closed' ? 'closed' : 'gone'}`;
    else if (
      facts_.view &&
      !facts_.view.shards.some((s) => s.shardId === allocation.shardId) &&
      checkedAt - Date.parse(allocation.since) > ALLOCATION_GRACE_MS
    ) {
      reason = `no engine runs shard ${allocation.shardId} and ${allocation.replicaId} no longer uses it`;
    }
    if (!reason) continue;
    releases.add(allocation.shardId);
    actions.push({
      kind: 'release',
      replicaId: allocation.replicaId,
      shardId: allocation.shardId,
      gpuIndices: [...allocation.gpuIndices],
      reason,
    });
  }

  for (const process of report.unidentified) {
    actions.push({ kind: 'kill', pid: process.pid, gpuIndices: [...process.gpuIndices], command: process.command, reason: process.reason });
  }
  return { actions, claims, releases: [...releases], unchanged };
}

function sameSet(a: number[], b: number[]): boolean {
  return a.length === b.length && a.every((value) => b.includes(value));
}
