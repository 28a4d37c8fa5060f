// Placement: choose hosts for a replica and reserve GPUs on them through each node
// workflow's `reserve` Update (the single writer of that host's GPUs). Control side.
//
// Policy:
//  1. Only candidates that fit, from the capacity index: the node workflows' search
//     attributes (LlmgwGpuClass, LlmgwState, LlmgwFreeGpus), one visibility call. A node is
//     asked to reserve only if the index says it has room, so a replica waiting for capacity
//     records nothing on any node; a rejected reserve means "the index was stale".
//  2. A node that just freed GPUs for this replica (the capacityChanged hint) comes first.
//  3. Spread: a node that already runs replicas of this deployment comes after one that runs
//     none (one host failure should not take a deployment down).
//  4. Near: among those, a node whose weights cache already holds the revision (its agent's
//     report, in the node's memo, read with the index) comes first: it starts with no fetch.
//  5. Otherwise pack: the node with the fewest free GPUs that still fit, so that large holes
//     stay free for large replicas. Ties rotate by the replica's sequence number, so replicas
//     placed at the same moment land on different nodes.
//  6. Multi-node profiles are placed as a gang on hosts of one fabric (and pool), all or
//     nothing (common/placement/choose-hosts.ts).
// The node itself checks health, memory, NVLink and NUMA when it picks the GPUs.
import { queryLiteral } from '../common/safe-name.js';
import type { Client } from '@temporalio/client';
import { nodeWorkflowId, shardId as makeShardId } from '../common/names.js';
import { HELD_WEIGHTS_MEMO, heldWeightsKey, type ReserveResult } from '../common/node-types.js';
import { heldKeyOfSource } from '../common/held-weights.js';
import { gangHostFromView, placeGangOnHosts, summariseReasons, type GangHost } from '../common/placement/choose-hosts.js';
import type { ShardPlacement } from '../common/replica-types.js';
import { describeNodeQuery, releaseUpdate, reserveUpdate } from '../workflows/definitions.js';
import { wakeWaitersFor } from './capacity.js';
import { listShared } from './shared-list.js';
import { placementsInFlight, type PlacementsInFlight } from './placement-inflight.js';
import { withTickets } from './placement-tickets.js';

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
  /** Nodes to try first (a node that just freed GPUs and woke this replica). */
  preferNodes?: string[];
  /** The revision's signature, which the placement tickets name (absent: unsigned revision). */
  revision?: string;
  /** The revision's served name, which the tickets name (the agent checks it against the revision). */
  servedName?: string;
  /** The revision's pinned model source: nodes that hold it come first among equals. */
  modelSource?: string;
}

export type PlaceResult =
  | { ok: true; shards: ShardPlacement[] }
  | {
      ok: false;
      reason: string;
      /** Look again this soon rather than wait for a wake-up: the index was stale, or only avoided nodes fit. */
      retryInMs?: number;
      onlyAvoidedFit?: boolean;
    };

export interface IndexedNode {
  nodeId: string;
  state: string;
  free: number;
  siblings: number;
  /** Its host's weights cache holds the revision (no fetch before the engine starts). */
  holds?: boolean;
}

/** Reserves tried per placement before the index is considered stale. */
const MAX_RESERVES = 3;

/** Counts each placement by outcome, with its latency (the control worker's metrics). */
export type PlacementMetric = (outcome: 'placed' | 'unschedulable' | 'error', ms: number) => void;

export function createPlacementActivities(
  client: Client,
  options: { log?: (line: string) => void; metric?: PlacementMetric; catalogKeyFile?: string } = {},
) {
  const log = options.log ?? (() => undefined);
  const metric = options.metric ?? (() => undefined);
  const inFlight = placementsInFlight(client);
  const reserveOn = (nodeId: string, request: PlaceRequest, rank: number): Promise<ReserveResult> =>
    inFlight.reserve(nodeId, request.gpusPerNode, () =>
      client.workflow.getHandle(nodeWorkflowId(nodeId)).executeUpdate(reserveUpdate, {
        args: [
          {
            shardId: makeShardId(request.replicaId, rank, request.attempt),
            replicaId: request.replicaId,
            count: request.gpusPerNode,
            gpuClass: request.gpuClass,
            minFreeMemoryMib: request.minFreeMemoryMib,
          },
        ],
      }),
    );

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
    const index = await readCapacityIndex(client, request);
    // A node named by a wake-up has just freed GPUs that the index (shared for a moment, and
    // lagging the node) may not show yet: ask it what it holds now.
    await Promise.all(
      index
        .filter((n) => request.preferNodes?.includes(n.nodeId))
        .map(async (n) => {
          const view = await inFlight.describe(n.nodeId);
          if (view && view.phase === 'Ready' && !view.cordoned) Object.assign(n, { state: 'Ready', free: view.freeGpus.length });
        }),
    );
    const ready = index.filter((n) => n.state === 'Ready');
    if (!ready.length) {
      const others = index.length ? ` (${index.map((n) => `${n.nodeId} ${n.state}`).join(', ')})` : '';
      return { ok: false, reason: `no Ready node with ${request.gpuClass} GPUs${others}` };
    }
    const fits = (n: IndexedNode): boolean => n.free >= request.gpusPerNode;
    const candidates = rankCandidates(
      ready.filter((n) => !request.avoidNodes.includes(n.nodeId) && fits(n)),
      request,
    );
    const needHosts = Math.max(1, request.nodes);
    if (candidates.length < needHosts) {
      const avoidedFit = ready.some((n) => request.avoidNodes.includes(n.nodeId) && fits(n));
      const largest = [...ready].sort((a, b) => b.free - a.free)[0]!;
      const shortOf =
        needHosts > 1
          ? `${candidates.length} of ${needHosts} hosts needed have ${request.gpusPerNode} free ${request.gpuClass} GPUs`
          : `no Ready ${request.gpuClass} node has room: needs ${request.gpusPerNode} GPUs, ${largest.free} free at most (${largest.nodeId}, of ${ready.length} Ready node${ready.length > 1 ? 's' : ''})`;
      if (avoidedFit) {
        return {
          ok: false,
          reason: `${shortOf}; only nodes it failed on have room (${request.avoidNodes.join(', ')})`,
          retryInMs: 10_000,
          onlyAvoidedFit: true,
        };
      }
      return { ok: false, reason: shortOf };
    }
    if (request.nodes > 1) return placeGang(client, request, candidates, reserveOn, placement);
    const reasons: string[] = [];
    for (const candidate of await refreshTop(inFlight, request, candidates)) {
      const result = await reserveOn(candidate.nodeId, request, 0);
      if (result.ok) return { ok: true, shards: [placement(candidate.nodeId, 0, request, result)] };
      reasons.push(result.reason);
    }
    return { ok: false, reason: summariseReasons(reasons) || 'the capacity index was a moment stale: looking again', retryInMs: 1_000 };
  };

  return {
    async placeReplica(request: PlaceRequest): Promise<PlaceResult> {
      const started = performance.now();
      try {
        const result = withTickets(await place(request), request, options.catalogKeyFile);
        metric(result.ok ? 'placed' : 'unschedulable', performance.now() - started);
        return result;
      } catch (error) {
        metric('error', performance.now() - started);
        throw error;
      }
    },

    async releaseGpus(request: { nodeId: string; shardId: string }): Promise<boolean> {
      const released = await client.workflow
        .getHandle(nodeWorkflowId(request.nodeId))
        .executeUpdate(releaseUpdate, { args: [{ shardId: request.shardId }] });
      // Freed GPUs go to whoever has waited longest for them, at once.
      if (released)
        await wakeWaitersFor(client, request.nodeId).catch((error: unknown) =>
          log(`waking waiters after a release on ${request.nodeId}: ${String(error)}`),
        );
      return released;
    },
  };
}

/** The node workflows of a GPU class as the index shows them, with this deployment's replicas per node. */
async function readCapacityIndex(client: Client, request: PlaceRequest): Promise<IndexedNode[]> {
  const siblings = new Map<string, number>();
  const replicas = `WorkflowType = 'replica' AND ExecutionStatus = 'Running' AND LlmgwDeployment = ${queryLiteral('deployment', request.deployment)}`;
  for (const replica of await listShared(client, replicas)) {
    if (replica.workflowId === request.replicaId) continue;
    const nodes = replica.searchAttributes?.LlmgwNodes;
    for (const node of Array.isArray(nodes) ? nodes : []) if (typeof node === 'string') siblings.set(node, (siblings.get(node) ?? 0) + 1);
  }
  const index: IndexedNode[] = [];
  const wanted = request.modelSource ? heldKeyOfSource(request.modelSource) : undefined;
  const nodes = `WorkflowType = 'node' AND ExecutionStatus = 'Running' AND LlmgwGpuClass = ${queryLiteral('gpuClass', request.gpuClass)}`;
  for (const execution of await listShared(client, nodes)) {
    const free = execution.searchAttributes?.LlmgwFreeGpus;
    const state = execution.searchAttributes?.LlmgwState;
    index.push({
      nodeId: execution.workflowId.replace(/^node\//, ''),
      state: Array.isArray(state) && typeof state[0] === 'string' ? state[0] : 'Unknown',
      free: Array.isArray(free) && typeof free[0] === 'number' ? free[0] : 0,
      siblings: siblings.get(execution.workflowId.replace(/^node\//, '')) ?? 0,
      holds: wanted !== undefined && holdsIn(execution.memo?.[HELD_WEIGHTS_MEMO], wanted),
    });
  }
  return index;
}

/** How many of the best candidates are asked (a query each, no event) for their exact state. */
const REFRESHED = 6;

/**
 * The index lags a reservation by a moment, and replicas of one deployment are placed at the
 * same moment: the best few candidates are asked what they hold right now (a query, which
 * records nothing), so that a replica placed a moment ago already counts for spreading and
 * packing. Returns the ones to try, best first.
 */
async function refreshTop(inFlight: PlacementsInFlight, request: PlaceRequest, candidates: IndexedNode[]): Promise<IndexedNode[]> {
  const top = candidates.slice(0, REFRESHED);
  const wanted = request.modelSource ? heldKeyOfSource(request.modelSource) : undefined;
  const fresh = await Promise.all(
    top.map(async (candidate) => {
      const view = await inFlight.describe(candidate.nodeId);
      // GPUs other placements of this worker are reserving there right now are not room.
      const reserving = inFlight.reserving(candidate.nodeId);
      if (!view) return { ...candidate, free: candidate.free - reserving };
      const siblings = new Set(
        view.allocations
          .filter((a) => a.replicaId.startsWith(`replica/${request.deployment}/`) && a.replicaId !== request.replicaId)
          .map((a) => a.replicaId),
      ).size;
      const holds =
        view.weights && wanted !== undefined ? view.weights.some((w) => heldWeightsKey(w.repo, w.commit) === wanted) : candidate.holds;
      return { ...candidate, free: view.freeGpus.length - reserving, siblings, holds };
    }),
  );
  return rankCandidates(
    fresh.filter((c) => c.free >= request.gpusPerNode),
    request,
  ).slice(0, MAX_RESERVES);
}

/** Whether a node's memo lists the held-weights key. */
function holdsIn(listed: unknown, key: string): boolean {
  return Array.isArray(listed) && listed.includes(key);
}

/** Candidates best first: the hinted node, then spread, then near (holds the weights), then pack, then a rotation by sequence number. */
export function rankCandidates(candidates: IndexedNode[], request: Pick<PlaceRequest, 'replicaId' | 'preferNodes'>): IndexedNode[] {
  const seq = Number(/\/(\d+)$/.exec(request.replicaId)?.[1] ?? 0);
  const byId = [...candidates].sort((a, b) => a.nodeId.localeCompare(b.nodeId));
  const rotation = (c: IndexedNode): number => (byId.indexOf(c) - seq + byId.length * 1000) % byId.length;
  const preferred = (c: IndexedNode): number => (request.preferNodes?.includes(c.nodeId) ? 0 : 1);
  return [...candidates].sort(
    (a, b) =>
      preferred(a) - preferred(b) ||
      a.siblings - b.siblings ||
      Number(!a.holds) - Number(!b.holds) ||
      a.free - b.free ||
      rotation(a) - rotation(b),
  );
}

type Reserve = (nodeId: string, request: PlaceRequest, rank: number) => Promise<ReserveResult>;
type MakePlacement = (nodeId: string, rank: number, request: PlaceRequest, result: Extract<ReserveResult, { ok: true }>) => ShardPlacement;

async function placeGang(
  client: Client,
  request: PlaceRequest,
  candidates: IndexedNode[],
  reserveOn: Reserve,
  makePlacement: MakePlacement,
): Promise<PlaceResult> {
  // Gangs need each host's fabric and free HCAs, which only the node knows: ask the few that fit.
  const hosts: GangHost[] = [];
  for (const candidate of candidates) {
    const view = await client.workflow.getHandle(nodeWorkflowId(candidate.nodeId)).query(describeNodeQuery);
    const host = gangHostFromView(
      view,
      candidate.siblings,
      request.pool,
      request.modelSource ? heldKeyOfSource(request.modelSource) : undefined,
    );
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
