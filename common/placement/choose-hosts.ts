// Which hosts a multi-node replica lands on: the pure half of gang placement. The
// placement activity feeds it node views and reserves through the node workflows;
// unit tests feed it simulated hosts and a fake reserve/release.
//
// Policy:
//  1. One fabric for the whole gang (and one pool, when the deployment names one): the
//     ranks talk NCCL over InfiniBand, which does not cross fabrics, so a gang that does
//     not fit on one fabric waits rather than being split.
//  2. Fabrics by the rate of their fastest roomy host, then by name; hosts within a
//     fabric by rate, then by free HCAs (a rank needs an HCA beside its GPUs), then the
//     fewest replicas of the same deployment, then those that hold the weights, then by id.
//  3. All or nothing: when a fabric's reserves fall short, what it granted is released
//     before the next fabric is tried, so a failed gang never holds GPUs.
// The GPUs (and the HCAs beside them) inside each host are chosen by the node itself.
import { heldWeightsKey, type NodeView, type ReserveResult } from '../node-types.js';

export interface GangRequest {
  nodes: number;
  gpusPerNode: number;
  pool?: string;
}

/** One host as gang placement sees it. */
export interface GangHost {
  nodeId: string;
  fabric: string;
  rateGbps: number;
  freeGpus: number;
  /** HCAs of the fabric that no allocation on the host holds. */
  freeHcas: number;
  /** Replicas of the same deployment already on the host. */
  siblings: number;
  /** The host's weights cache holds the revision. */
  holds?: boolean;
}

export interface GangFabric {
  fabric: string;
  /** Hosts with room for a rank, best first. */
  hosts: GangHost[];
}

export interface GangGrant {
  nodeId: string;
  rank: number;
  result: Extract<ReserveResult, { ok: true }>;
}

/** The node workflows' reserve and release, by host and rank (the caller knows the shard ids). */
export interface GangReservations {
  reserve(nodeId: string, rank: number): Promise<ReserveResult>;
  release(nodeId: string, rank: number): Promise<unknown>;
}

export type GangResult = { ok: true; grants: GangGrant[] } | { ok: false; reason: string };

/** A node's view as a gang host; undefined when it cannot take part (no inventory, no fabric, another pool). */
export function gangHostFromView(view: NodeView, siblings: number, pool?: string, weightsKey?: string): GangHost | undefined {
  const inv = view.inventory;
  if (!inv) return undefined;
  if (pool && inv.labels.pool !== pool) return undefined;
  const fabric = inv.fabrics[0];
  if (!fabric) return undefined;
  const held = new Set(view.allocations.flatMap((allocation) => allocation.hcas));
  return {
    nodeId: view.nodeId,
    fabric: fabric.fabric,
    rateGbps: fabric.rateGbps,
    freeGpus: view.freeGpus.length,
    freeHcas: fabric.hcas.filter((hca) => !held.has(hca)).length,
    siblings,
    holds: weightsKey !== undefined && (view.weights ?? []).some((w) => heldWeightsKey(w.repo, w.commit) === weightsKey),
  };
}

/** Fabrics that have room for the whole gang, best first, and why the others do not. */
export function rankGangFabrics(hosts: GangHost[], request: GangRequest): { fabrics: GangFabric[]; reasons: string[] } {
  const byFabric = new Map<string, GangHost[]>();
  for (const host of hosts) byFabric.set(host.fabric, [...(byFabric.get(host.fabric) ?? []), host]);
  const fabrics: GangFabric[] = [];
  const reasons: string[] = [];
  for (const [fabric, members] of [...byFabric.entries()].sort((a, b) => a[0].localeCompare(b[0]))) {
    const roomy = members
      .filter((host) => host.freeGpus >= request.gpusPerNode)
      .sort(
        (a, b) =>
          b.rateGbps - a.rateGbps ||
          b.freeHcas - a.freeHcas ||
          a.siblings - b.siblings ||
          Number(!a.holds) - Number(!b.holds) ||
          a.nodeId.localeCompare(b.nodeId),
      );
    if (roomy.length < request.nodes) {
      reasons.push(
        `fabric ${fabric}: ${roomy.length} of ${members.length} hosts have ${request.gpusPerNode} free GPUs, ${request.nodes} needed`,
      );
      continue;
    }
    fabrics.push({ fabric, hosts: roomy });
  }
  const fastest = (f: GangFabric): number => Math.max(...f.hosts.map((host) => host.rateGbps));
  fabrics.sort((a, b) => fastest(b) - fastest(a) || a.fabric.localeCompare(b.fabric));
  return { fabrics, reasons };
}

/** Ranks and reserves a gang, all or nothing; a failed result holds nothing. */
export async function placeGangOnHosts(hosts: GangHost[], request: GangRequest, io: GangReservations): Promise<GangResult> {
  if (!hosts.length) {
    return {
      ok: false,
      reason: `a ${request.nodes}-node replica needs hosts on an InfiniBand fabric${request.pool ? ` in pool ${request.pool}` : ''}; none is Ready`,
    };
  }
  const { fabrics, reasons } = rankGangFabrics(hosts, request);
  for (const { fabric, hosts: roomy } of fabrics) {
    const grants: GangGrant[] = [];
    for (const host of roomy) {
      if (grants.length === request.nodes) break;
      const rank = grants.length;
      let result: ReserveResult;
      try {
        result = await io.reserve(host.nodeId, rank);
      } catch (error) {
        // The reserve may have been applied even though its answer was lost (a timed-out
        // Update): release it too, since release is idempotent by shard id. The reserve's
        // error is the one worth reporting, so a release failing behind it is not.
        await releaseAll(io, [...grants, { nodeId: host.nodeId, rank }]).catch(() => undefined);
        throw error;
      }
      if (result.ok) grants.push({ nodeId: host.nodeId, rank, result });
      else reasons.push(result.reason);
    }
    if (grants.length === request.nodes) return { ok: true, grants };
    await releaseAll(io, grants);
    reasons.push(`fabric ${fabric}: only ${grants.length} of ${request.nodes} hosts could reserve`);
  }
  return { ok: false, reason: `not split across fabrics: ${summariseReasons(reasons)}` };
}

async function releaseAll(io: GangReservations, grants: { nodeId: string; rank: number }[]): Promise<void> {
  for (const grant of grants) await io.release(grant.nodeId, grant.rank);
}

/** Placement's reasons in one line: the first few distinct ones and how many more. */
export function summariseReasons(reasons: string[]): string {
  const unique = [...new Set(reasons)];
  return unique.length > 4 ? `${unique.slice(0, 4).join('; ')}; and ${unique.length - 4} more` : unique.join('; ');
}
