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
import { ApplicationFailure } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { CatalogSource } from '../catalog/watch.js';
import { nodeWorkflowId, shardId as makeShardId } from '../common/names.js';
import type { ReserveResult } from '../common/node-types.js';
import { heldKeyOfSource } from '../common/held-weights.js';
import { gangHostFromView, placeGangOnHosts, summariseReasons, type GangHost } from '../common/placement/choose-hosts.js';
import type { ShardPlacement } from '../common/replica-types.js';
import { describeNodeQuery, releaseUpdate, reserveUpdate } from '../workflows/definitions.js';
import { wakeWaitersFor } from './capacity.js';
import { signedNodeRequest } from './node-requests.js';
import { placementsInFlight, type PlacementsInFlight } from './placement-inflight.js';
import { createWeightsTrust, type WeightsTrust } from './weights-verdict.js';
import { rankCandidates, readCapacityIndex, refreshIndexed, refreshTop, REFRESHED, type IndexedNode } from './placement-index.js';
import { enrolledLeaderKey, LeaderUnreadable, renewTickets, ticketNames, withTickets } from './placement-tickets.js';

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
  /**
   * The served name the replica expects: placement refuses (signs nothing) when it is not its
   * deployment's; the tickets name the deployment's own (the agent checks it against the revision).
   */
  servedName?: string;
  /** The revision's pinned model source: nodes that hold it come first among equals. */
  modelSource?: string;
  /** A profile with a sleep policy: the share of each GPU it takes awake; it may go where only sleepers are (docs/sleep.md). */
  awakeShare?: number;
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

/** Counts each placement by outcome, with its latency (the control worker's metrics). */
export type PlacementMetric = (outcome: 'placed' | 'unschedulable' | 'error', ms: number) => void;

export function createPlacementActivities(
  client: Client,
  options: {
    log?: (line: string) => void;
    metric?: PlacementMetric;
    catalogKeyFile?: string;
    trustUnenrolled?: boolean;
    /** The live catalog: tickets, renewals included, are signed only for revisions it still allows. */
    catalog?: CatalogSource;
  } = {},
) {
  const log = options.log ?? (() => undefined);
  const metric = options.metric ?? (() => undefined);
  const trustWeights = createWeightsTrust(options.catalogKeyFile, options.trustUnenrolled === true, log);
  const inFlight = placementsInFlight(client, trustWeights);
  return {
    async placeReplica(request: PlaceRequest): Promise<PlaceResult> {
      const started = performance.now();
      try {
        // Who asks and for what is settled before any GPU is reserved: a refusal holds nothing.
        const names = await ticketNames(client, request, options.catalogKeyFile, options.catalog);
        const placed = await placeOnIndex(
          client,
          inFlight,
          request,
          options.trustUnenrolled === true,
          trustWeights,
          options.catalogKeyFile,
        );
        const leaderKey = await enrolledLeaderKey(placed, (nodeId) => inFlight.describe(nodeId), options.catalogKeyFile).catch(
          async (error: unknown) => {
            if (!(error instanceof LeaderUnreadable) || !placed.ok) throw error;
            // Nothing is signed, so nothing may stay reserved: the retry places afresh.
            await Promise.all(
              placed.shards.map((s) =>
                client.workflow
                  .getHandle(nodeWorkflowId(s.nodeId))
                  .executeUpdate(releaseUpdate, {
                    args: [signedNodeRequest(options.catalogKeyFile, s.nodeId, 'release', { shardId: s.shardId })],
                  })
                  .catch(() => undefined),
              ),
            );
            throw ApplicationFailure.retryable(error.message, 'LeaderUnreadable');
          },
        );
        const result = withTickets(placed, request, names, options.catalogKeyFile, leaderKey);
        metric(result.ok ? 'placed' : 'unschedulable', performance.now() - started);
        return result;
      } catch (error) {
        metric('error', performance.now() - started);
        throw error;
      }
    },

    /** The shards' tickets signed again for the calling run's chain, just before it starts them. */
    async renewTickets(request: { shards: ShardPlacement[] }): Promise<ShardPlacement[]> {
      return renewTickets(client, request.shards, options.catalogKeyFile, options.catalog);
    },

    async releaseGpus(request: { nodeId: string; shardId: string }): Promise<boolean> {
      const released = await client.workflow.getHandle(nodeWorkflowId(request.nodeId)).executeUpdate(releaseUpdate, {
        args: [signedNodeRequest(options.catalogKeyFile, request.nodeId, 'release', { shardId: request.shardId })],
      });
      // Freed GPUs go to whoever has waited longest for them, at once.
      if (released)
        await wakeWaitersFor(client, request.nodeId).catch((error: unknown) =>
          log(`waking waiters after a release on ${request.nodeId}: ${String(error)}`),
        );
      return released;
    },
  };
}

/** Asks a node's workflow to reserve GPUs for one shard (counted while in flight, so concurrent placements see it). */
function reserveOn(
  client: Client,
  inFlight: PlacementsInFlight,
  nodeId: string,
  request: PlaceRequest,
  rank: number,
  allowUnenrolled: boolean,
): Promise<ReserveResult> {
  return inFlight.reserve(nodeId, request.gpusPerNode, () =>
    client.workflow.getHandle(nodeWorkflowId(nodeId)).executeUpdate(reserveUpdate, {
      args: [
        {
          shardId: makeShardId(request.replicaId, rank, request.attempt),
          replicaId: request.replicaId,
          count: request.gpusPerNode,
          gpuClass: request.gpuClass,
          minFreeMemoryMib: request.minFreeMemoryMib,
          ...(request.awakeShare !== undefined ? { awakeShare: request.awakeShare } : {}),
          ...(allowUnenrolled ? { allowUnenrolled } : {}),
        },
      ],
    }),
  );
}

function shardPlacement(nodeId: string, rank: number, request: PlaceRequest, result: Extract<ReserveResult, { ok: true }>): ShardPlacement {
  return {
    rank,
    nodeId,
    shardId: makeShardId(request.replicaId, rank, request.attempt),
    gpuIndices: result.gpuIndices,
    hcas: result.hcas,
    managementAddress: result.managementAddress,
    httpPort: 0,
    pid: 0,
  };
}

/** The policy above: candidates from the index (asking lagging nodes), ranked, then reserved best first. */
async function placeOnIndex(
  client: Client,
  inFlight: PlacementsInFlight,
  request: PlaceRequest,
  trustUnenrolled: boolean,
  trustWeights: WeightsTrust,
  catalogKeyFile: string | undefined,
): Promise<PlaceResult> {
  const index = await readCapacityIndex(client, request);
  // A worker that trusts unenrolled agents (an upgrade from 0.2.0, whose agents sign nothing;
  // one without a catalog key) places on them as on Ready nodes. Otherwise they are skipped here
  // and refused by the node itself (workflows/node/state.ts, reserve).
  const trusting = (): void => {
    if (trustUnenrolled) for (const n of index) if (n.state === 'Unenrolled') n.state = 'Ready';
  };
  trusting();
  // A node named by a wake-up has just freed GPUs that the index (shared for a moment, and
  // lagging the node) may not show yet: ask it what it holds now.
  await refreshIndexed(
    inFlight,
    index.filter((n) => request.preferNodes?.includes(n.nodeId)),
    request,
  );
  trusting();
  const usable = (n: IndexedNode): boolean => n.state === 'Ready' && !request.avoidNodes.includes(n.nodeId) && fits(n, request);
  const needHosts = Math.max(1, request.nodes);
  // Short of hosts by the index: the index may lag a node that registered or freed GPUs a
  // moment ago, and nobody will wake a replica that was not yet waiting then. Ask the nodes
  // themselves (queries, which record nothing) before saying there is no room.
  if (index.filter(usable).length < needHosts) await refreshIndexed(inFlight, index.filter((n) => !usable(n)).slice(0, REFRESHED), request);
  trusting();
  const ready = index.filter((n) => n.state === 'Ready');
  if (!ready.length) {
    const others = index.length ? ` (${index.map((n) => `${n.nodeId} ${n.state}`).join(', ')})` : '';
    return { ok: false, reason: `no Ready node with ${request.gpuClass} GPUs${others}` };
  }
  const candidates = rankCandidates(index.filter(usable), request, request.gpusPerNode);
  if (candidates.length < needHosts) return shortOfRoom(request, ready, candidates.length, needHosts);
  const reserve: Reserve = (nodeId, req, rank) => reserveOn(client, inFlight, nodeId, req, rank, trustUnenrolled);
  if (request.nodes > 1) return placeGang(client, request, candidates, reserve, shardPlacement, trustWeights, catalogKeyFile);
  const reasons: string[] = [];
  for (const candidate of await refreshTop(inFlight, request, candidates)) {
    const result = await reserve(candidate.nodeId, request, 0);
    if (result.ok) return { ok: true, shards: [shardPlacement(candidate.nodeId, 0, request, result)] };
    reasons.push(result.reason);
  }
  return { ok: false, reason: summariseReasons(reasons) || 'the capacity index was a moment stale: looking again', retryInMs: 1_000 };
}

function fits(n: IndexedNode, request: PlaceRequest): boolean {
  return n.free >= request.gpusPerNode;
}

/** Too few Ready hosts have room: says how short, and looks again soon if only avoided nodes fit. */
function shortOfRoom(request: PlaceRequest, ready: IndexedNode[], found: number, needHosts: number): PlaceResult {
  const avoidedFit = ready.some((n) => request.avoidNodes.includes(n.nodeId) && fits(n, request));
  const largest = [...ready].sort((a, b) => b.free - a.free)[0]!;
  const shortOf =
    needHosts > 1
      ? `${found} of ${needHosts} hosts needed have ${request.gpusPerNode} free ${request.gpuClass} GPUs`
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

type Reserve = (nodeId: string, request: PlaceRequest, rank: number) => Promise<ReserveResult>;
type MakePlacement = (nodeId: string, rank: number, request: PlaceRequest, result: Extract<ReserveResult, { ok: true }>) => ShardPlacement;

async function placeGang(
  client: Client,
  request: PlaceRequest,
  candidates: IndexedNode[],
  reserveOn: Reserve,
  makePlacement: MakePlacement,
  trustWeights: WeightsTrust,
  catalogKeyFile: string | undefined,
): Promise<PlaceResult> {
  // Gangs need each host's fabric and free HCAs, which only the node knows: ask the few that fit.
  const hosts: GangHost[] = [];
  for (const candidate of candidates) {
    const view = trustWeights(await client.workflow.getHandle(nodeWorkflowId(candidate.nodeId)).query(describeNodeQuery));
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
      client.workflow.getHandle(nodeWorkflowId(nodeId)).executeUpdate(releaseUpdate, {
        args: [signedNodeRequest(catalogKeyFile, nodeId, 'release', { shardId: makeShardId(request.replicaId, rank, request.attempt) })],
      }),
  });
  if (!result.ok) return result;
  return { ok: true, shards: result.grants.map((grant) => makePlacement(grant.nodeId, grant.rank, request, grant.result)) };
}
