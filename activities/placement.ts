// Placement: choose hosts for a replica and reserve GPUs on them through each node
// workflow's `reserve` Update (the single writer of that host's GPUs).
//
// Policy:
//  1. Fit first: nodes of the profile's GPU class that are Ready, not avoided (a node
//     where this replica just failed), with enough free healthy GPUs; the node itself
//     checks health, memory, NVLink and NUMA when it picks the GPUs.
//  2. Spread: a node that already runs replicas of this deployment comes after one that
//     runs none (one host failure should not take a deployment down).
//  3. Otherwise pack: the node with the fewest free GPUs that still fit, so that large
//     holes stay free for large replicas.
//  4. Multi-node profiles are placed as a gang on hosts of one fabric (and pool), all or
//     nothing: a partial reservation is released before the next fabric is tried
//     (common/placement/choose-hosts.ts ranks the hosts and holds that rule).
// Candidates come from search attributes (LlmgwGpuClass, LlmgwState, LlmgwFreeGpus), which
// can lag a moment behind; a rejected reserve just means "next candidate", as in
// optimistic shared-state schedulers.
import type { Client } from '@temporalio/client';
import { nodeWorkflowId, shardId as makeShardId } from '../common/names.js';
import type { ReserveResult } from '../common/node-types.js';
import { gangHostFromView, placeGangOnHosts, summariseReasons, type GangHost } from '../common/placement/choose-hosts.js';
import type { ShardPlacement } from '../common/replica-types.js';
import { describeNodeQuery, releaseUpdate, reserveUpdate } from '../workflows/definitions.js';

export interface PlaceRequest {
  replicaId: string;
  deployment: string;
  nodes: number;
  gpusPerNode: number;
  gpuClass: string;
  minFreeMemoryMib: number;
  avoidNodes: string[];
  /** Placement number of this replica: part of the shard ids, so a re-placement is a new reservation. */
  attempt: number;
  pool?: string;
}

export type PlaceResult = { ok: true; shards: ShardPlacement[] } | { ok: false; reason: string };

interface Candidate {
  nodeId: string;
  free: number;
  siblings: number;
}

/** Counts each placement by outcome, with its latency (the control worker's metrics). */
export type PlacementMetric = (outcome: 'placed' | 'unschedulable' | 'error', ms: number) => void;

export function createPlacementActivities(client: Client, metric: PlacementMetric = () => undefined) {
  const reserveOn = (nodeId: string, request: PlaceRequest, rank: number): Promise<ReserveResult> =>
    client.workflow.getHandle(nodeWorkflowId(nodeId)).executeUpdate(reserveUpdate, {
      args: [
        {
          shardId: makeShardId(request.replicaId, rank, request.attempt),
          replicaId: request.replicaId,
          count: request.gpusPerNode,
          gpuClass: request.gpuClass,
          minFreeMemoryMib: request.minFreeMemoryMib,
          wakeWorkflowId: request.replicaId,
        },
      ],
    });

  const placement = (
    nodeId: string,
    rank: number,
    request: PlaceRequest,
    result: Extract<ReserveResult, { ok: true }>,
  ): ShardPlacement => ({
    rank,
    nodeId,
    shardId: makeShardId(request.replicaId, rank, request.attempt),
    gpuIndices: result.gpuIndices,
    hcas: result.hcas,
    managementAddress: result.managementAddress,
    httpPort: 0,
    pid: 0,
  });

  const place = async (request: PlaceRequest): Promise<PlaceResult> => {
    const candidates = await listCandidates(client, request);
    if (!candidates.length) {
      const avoided = request.avoidNodes.length ? ` (avoiding ${request.avoidNodes.join(', ')} after failures there)` : '';
      return { ok: false, reason: `no Ready node with ${request.gpuClass} GPUs${avoided}` };
    }
    const reasons: string[] = [];
    if (request.nodes <= 1) {
      for (const candidate of candidates) {
        const result = await reserveOn(candidate.nodeId, request, 0);
        if (result.ok) return { ok: true, shards: [placement(candidate.nodeId, 0, request, result)] };
        reasons.push(result.reason);
      }
      return { ok: false, reason: summariseReasons(reasons) };
    }
    return placeGang(client, request, candidates, reserveOn, placement);
  };

  return {
    async placeReplica(request: PlaceRequest): Promise<PlaceResult> {
      const started = performance.now();
      try {
        const result = await place(request);
        metric(result.ok ? 'placed' : 'unschedulable', performance.now() - started);
        return result;
      } catch (error) {
        metric('error', performance.now() - started);
        throw error;
      }
    },

    async releaseGpus(request: { nodeId: string; shardId: string }): Promise<boolean> {
      return client.workflow
        .getHandle(nodeWorkflowId(request.nodeId))
        .executeUpdate(releaseUpdate, { args: [{ shardId: request.shardId }] });
    },
  };
}

async function listCandidates(client: Client, request: PlaceRequest): Promise<Candidate[]> {
  const siblings = new Map<string, number>();
  for await (const replica of client.workflow.list({
    query: `WorkflowType = 'replica' AND ExecutionStatus = 'Running' AND LlmgwDeployment = '${request.deployment}'`,
  })) {
    if (replica.workflowId === request.replicaId) continue;
    const nodes = replica.searchAttributes?.LlmgwNodes;
    for (const node of Array.isArray(nodes) ? nodes : []) if (typeof node === 'string') siblings.set(node, (siblings.get(node) ?? 0) + 1);
  }
  const candidates: Candidate[] = [];
  const query = `WorkflowType = 'node' AND ExecutionStatus = 'Running' AND LlmgwGpuClass = '${request.gpuClass}' AND LlmgwState = 'Ready'`;
  for await (const execution of client.workflow.list({ query })) {
    const nodeId = execution.workflowId.replace(/^node\//, '');
    if (request.avoidNodes.includes(nodeId)) continue;
    const freeValue = execution.searchAttributes?.LlmgwFreeGpus;
    const free = Array.isArray(freeValue) && typeof freeValue[0] === 'number' ? freeValue[0] : 0;
    candidates.push({ nodeId, free, siblings: siblings.get(nodeId) ?? 0 });
  }
  // Search attributes lag a moment behind reservations; for a fleet of modest size, ask
  // the nodes themselves (a query each) what they hold, so that a replica placed a
  // moment ago already counts for spreading and packing.
  if (candidates.length <= 64) {
    await Promise.all(
      candidates.map(async (candidate) => {
        const view = await client.workflow
          .getHandle(nodeWorkflowId(candidate.nodeId))
          .query(describeNodeQuery)
          .catch(() => undefined);
        if (!view) return;
        candidate.free = view.freeGpus.length;
        candidate.siblings = new Set(
          view.allocations
            .filter((a) => a.replicaId.startsWith(`replica/${request.deployment}/`) && a.replicaId !== request.replicaId)
            .map((a) => a.replicaId),
        ).size;
      }),
    );
  }
  const fits = (c: Candidate): number => (c.free >= request.gpusPerNode ? 0 : 1);
  // Replicas of one deployment are placed at the same time, before the attributes show
  // each other: rotating the tie-break by the replica's sequence number sends them to
  // different nodes even then.
  const seq = Number(/\/(\d+)$/.exec(request.replicaId)?.[1] ?? 0);
  const byId = [...candidates].sort((a, b) => a.nodeId.localeCompare(b.nodeId));
  const rotation = (c: Candidate): number => (byId.indexOf(c) - seq + byId.length * 1000) % byId.length;
  // Nodes that (by the slightly stale attributes) cannot fit still come last rather than
  // not at all: the reserve is the truth.
  return candidates.sort((a, b) => fits(a) - fits(b) || a.siblings - b.siblings || a.free - b.free || rotation(a) - rotation(b));
}

type Reserve = (nodeId: string, request: PlaceRequest, rank: number) => Promise<ReserveResult>;
type MakePlacement = (nodeId: string, rank: number, request: PlaceRequest, result: Extract<ReserveResult, { ok: true }>) => ShardPlacement;

async function placeGang(
  client: Client,
  request: PlaceRequest,
  candidates: Candidate[],
  reserveOn: Reserve,
  makePlacement: MakePlacement,
): Promise<PlaceResult> {
  const hosts: GangHost[] = [];
  for (const candidate of candidates) {
    const view = await client.workflow.getHandle(nodeWorkflowId(candidate.nodeId)).query(describeNodeQuery);
    const host = gangHostFromView(view, candidate.siblings, request.pool);
    if (host) hosts.push(host);
  }
  const result = await placeGangOnHosts(hosts, request, {
    reserve: (nodeId, rank) => reserveOn(nodeId, request, rank),
    release: (nodeId, rank) =>
      client.workflow
        .getHandle(nodeWorkflowId(nodeId))
        .executeUpdate(releaseUpdate, { args: [{ shardId: makeShardId(request.replicaId, rank, request.attempt) }] }),
  });
  if (!result.ok) return result;
  return { ok: true, shards: result.grants.map((grant) => makePlacement(grant.nodeId, grant.rank, request, grant.result)) };
}
