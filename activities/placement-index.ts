// The capacity index as placement reads it: the node workflows' search attributes and memo
// (one visibility call), corrected by asking the nodes themselves (queries, which record
// nothing) where the index lags, and the candidates ranked best first. Control side; the
// policy is described in placement.ts.
import type { Client } from '@temporalio/client';
import { HELD_WEIGHTS_MEMO, heldWeightsKey, SHARED_GPUS_MEMO, shownNodeState, type NodeView } from '../common/node-types.js';
import { roomFor } from '../common/placement/shared-gpus.js';
import { heldKeyOfSource } from '../common/held-weights.js';
import { queryLiteral } from '../common/safe-name.js';
import type { PlaceRequest } from './placement.js';
import type { PlacementsInFlight } from './placement-inflight.js';
import { listShared } from './shared-list.js';

export interface IndexedNode {
  nodeId: string;
  state: string;
  /** GPUs this request could take: the empty ones, and for a sharing request those only sleepers hold where it fits. */
  free: number;
  /** Of those, the empty ones: a sharing request goes where it disturbs no sleeper first. */
  empty?: number;
  siblings: number;
  /** Its host's weights cache holds the revision (no fetch before the engine starts). */
  holds?: boolean;
}

/** Reserves tried per placement before the index is considered stale. */
const MAX_RESERVES = 3;

/** The node workflows of a GPU class as the index shows them, with this deployment's replicas per node. */
export async function readCapacityIndex(client: Client, request: PlaceRequest): Promise<IndexedNode[]> {
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
    const freeAttribute = execution.searchAttributes?.LlmgwFreeGpus;
    const state = execution.searchAttributes?.LlmgwState;
    const free = Array.isArray(freeAttribute) && typeof freeAttribute[0] === 'number' ? freeAttribute[0] : 0;
    const shared = execution.memo?.[SHARED_GPUS_MEMO];
    const loads = Array.isArray(shared) ? shared.filter((load): load is number => typeof load === 'number') : [];
    index.push({
      nodeId: execution.workflowId.replace(/^node\//, ''),
      state: Array.isArray(state) && typeof state[0] === 'string' ? state[0] : 'Unknown',
      free: roomFor(free, loads, request.awakeShare),
      empty: free,
      siblings: siblings.get(execution.workflowId.replace(/^node\//, '')) ?? 0,
      holds: wanted !== undefined && holdsIn(execution.memo?.[HELD_WEIGHTS_MEMO], wanted),
    });
  }
  return index;
}

/** How many of the best candidates are asked (a query each, no event) for their exact state. */
export const REFRESHED = 6;

/** Sets each indexed node's state and free GPUs from the node itself (a query each, no event). */
export async function refreshIndexed(
  inFlight: PlacementsInFlight,
  nodes: IndexedNode[],
  request: Pick<PlaceRequest, 'awakeShare'>,
): Promise<void> {
  await Promise.all(
    nodes.map(async (n) => {
      const view = await inFlight.describe(n.nodeId);
      if (view) Object.assign(n, { state: shownNodeState(view), ...roomIn(view, request) });
    }),
  );
}

/** The room a node's own view shows for this request (shared-gpus.ts). */
function roomIn(view: NodeView, request: Pick<PlaceRequest, 'awakeShare'>): { free: number; empty: number } {
  return { free: roomFor(view.freeGpus.length, view.sharedGpus, request.awakeShare), empty: view.freeGpus.length };
}

/**
 * The index lags a reservation by a moment, and replicas of one deployment are placed at the
 * same moment: the best few candidates are asked what they hold right now (a query, which
 * records nothing), so that a replica placed a moment ago already counts for spreading and
 * packing. Returns the ones to try, best first.
 */
export async function refreshTop(inFlight: PlacementsInFlight, request: PlaceRequest, candidates: IndexedNode[]): Promise<IndexedNode[]> {
  const top = candidates.slice(0, REFRESHED);
  const wanted = request.modelSource ? heldKeyOfSource(request.modelSource) : undefined;
  const fresh = await Promise.all(
    top.map(async (candidate) => {
      const view = await inFlight.describe(candidate.nodeId);
      // GPUs other placements of this worker are reserving there right now are not room.
      const reserving = inFlight.reserving(candidate.nodeId);
      if (!view) return { ...candidate, free: candidate.free - reserving, empty: (candidate.empty ?? 0) - reserving };
      const siblings = new Set(
        view.allocations
          .filter((a) => a.replicaId.startsWith(`replica/${request.deployment}/`) && a.replicaId !== request.replicaId)
          .map((a) => a.replicaId),
      ).size;
      const holds =
        view.weights && wanted !== undefined ? view.weights.some((w) => heldWeightsKey(w.repo, w.commit) === wanted) : candidate.holds;
      const room = roomIn(view, request);
      return { ...candidate, free: room.free - reserving, empty: room.empty - reserving, siblings, holds };
    }),
  );
  return rankCandidates(
    fresh.filter((c) => c.free >= request.gpusPerNode),
    request,
    request.gpusPerNode,
  ).slice(0, MAX_RESERVES);
}

/** Whether a node's memo lists the held-weights key. */
function holdsIn(listed: unknown, key: string): boolean {
  return Array.isArray(listed) && listed.includes(key);
}

/**
 * Candidates best first: the hinted node, then spread, then one with `gpus` empty GPUs before one
 * whose sleepers would share, then near (holds the weights), then pack, then a rotation by sequence number.
 */
export function rankCandidates(
  candidates: IndexedNode[],
  request: Pick<PlaceRequest, 'replicaId' | 'preferNodes'>,
  gpus = 1,
): IndexedNode[] {
  const seq = Number(/\/(\d+)$/.exec(request.replicaId)?.[1] ?? 0);
  const byId = [...candidates].sort((a, b) => a.nodeId.localeCompare(b.nodeId));
  const rotation = (c: IndexedNode): number => (byId.indexOf(c) - seq + byId.length * 1000) % byId.length;
  const preferred = (c: IndexedNode): number => (request.preferNodes?.includes(c.nodeId) ? 0 : 1);
  const onSleepers = (c: IndexedNode): number => ((c.empty ?? c.free) >= gpus ? 0 : 1);
  return [...candidates].sort(
    (a, b) =>
      preferred(a) - preferred(b) ||
      a.siblings - b.siblings ||
      onSleepers(a) - onSleepers(b) ||
      Number(!a.holds) - Number(!b.holds) ||
      a.free - b.free ||
      rotation(a) - rotation(b),
  );
}
