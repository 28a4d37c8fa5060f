// Guards gang placement of multi-node replicas: one fabric for the whole gang, the HCAs
// beside the chosen GPUs, all or nothing. Four simulated H100 hosts (the example
// inventories on fabrics ib-a and ib-b) each hold a real node state; the node workflow's
// own reserve/release rules stand in for its Updates, so this tests the algorithm, not Temporal.
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readSimulatedInventory, simulatedHost, type SimulatedInventory } from '../../agent/discovery/simulated.js';
import { shardId } from '../../common/names.js';
import { registeredNodeState } from '../helpers/registered-node.js';
import type { ReserveResult } from '../../common/node-types.js';
import {
  gangHostFromView,
  placeGangOnHosts,
  rankGangFabrics,
  type GangHost,
  type GangRequest,
  type GangReservations,
} from '../../common/placement/choose-hosts.js';
import { release, reserve, viewOf, type NodeState } from '../../workflows/node/state.js';

const EXAMPLES = resolve(__dirname, '../../examples/inventories');
const NOW = '2025-01-01T00:00:00.000Z';
const REPLICA = 'replica/big/1';
const TP4_X2: GangRequest = { nodes: 2, gpusPerNode: 4 };

interface HostSpec {
  nodeId: string;
  fabric: 'ib-a' | 'ib-b';
  rateGbps?: number;
  labels?: Record<string, string>;
}

async function simulatedNode(spec: HostSpec, ordinal: number): Promise<NodeState> {
  const file: SimulatedInventory = await readSimulatedInventory(`${EXAMPLES}/h100x8-${spec.fabric}.yaml`);
  const inv =
    spec.rateGbps === undefined ? file : { ...file, hcas: (file.hcas ?? []).map((hca) => ({ ...hca, rateGbps: spec.rateGbps! })) };
  const host = simulatedHost(inv, { nodeId: spec.nodeId });
  return registeredNodeState(spec.nodeId, host, { managementAddress: `10.0.0.${ordinal + 1}`, labels: spec.labels ?? {} }, NOW);
}

/** Four hosts, two per fabric, whose reserve and release are the node workflow's rules; every call is logged in order. */
async function fleet(
  specs: HostSpec[] = [
    { nodeId: 'a1', fabric: 'ib-a' },
    { nodeId: 'a2', fabric: 'ib-a' },
    { nodeId: 'b1', fabric: 'ib-b' },
    { nodeId: 'b2', fabric: 'ib-b' },
  ],
) {
  const nodes = new Map<string, NodeState>();
  for (const [i, spec] of specs.entries()) nodes.set(spec.nodeId, await simulatedNode(spec, i));
  const node = (nodeId: string): NodeState => {
    const state = nodes.get(nodeId);
    if (!state) throw new Error(`no node ${nodeId}`);
    return state;
  };
  const calls: string[] = [];
  const io: GangReservations = {
    async reserve(nodeId, rank): Promise<ReserveResult> {
      calls.push(`reserve ${nodeId} r${rank}`);
      return reserve(
        node(nodeId),
        { shardId: shardId(REPLICA, rank, 1), replicaId: REPLICA, count: TP4_X2.gpusPerNode, gpuClass: 'H100' },
        NOW,
      );
    },
    async release(nodeId, rank) {
      calls.push(`release ${nodeId} r${rank}`);
      return release(node(nodeId), shardId(REPLICA, rank, 1));
    },
  };
  return {
    io,
    calls,
    /** What placement reads: each node's view, as the describe query returns it. */
    hosts: (pool?: string): GangHost[] => [...nodes.values()].flatMap((state) => gangHostFromView(viewOf(state), 0, pool) ?? []),
    /** Another replica takes `count` GPUs on a host. */
    occupy(nodeId: string, count: number): void {
      const result = reserve(node(nodeId), { shardId: `other.${nodeId}.${count}`, replicaId: 'replica/other/1', count }, NOW);
      if (!result.ok) throw new Error(result.reason);
    },
    heldByReplica: (nodeId: string): number[] =>
      node(nodeId)
        .allocations.filter((a) => a.replicaId === REPLICA)
        .flatMap((a) => a.gpuIndices),
  };
}

describe('gang placement on four hosts, two on fabric ib-a and two on ib-b', () => {
  it('lands a 2-node replica on two hosts of one fabric, with the HCAs beside its GPUs', async () => {
    const f = await fleet();
    const result = await placeGangOnHosts(f.hosts(), TP4_X2, f.io);
    if (!result.ok) throw new Error(result.reason);
    expect(result.grants.map((g) => [g.rank, g.nodeId])).toEqual([
      [0, 'a1'],
      [1, 'a2'],
    ]);
    for (const grant of result.grants) {
      // On these hosts HCA mlx5_i sits on GPU i's PCIe switch; the Ethernet ports mlx5_8/9 are never given.
      expect(grant.result.gpuIndices).toEqual([0, 1, 2, 3]);
      expect(grant.result.hcas).toEqual(['mlx5_0', 'mlx5_1', 'mlx5_2', 'mlx5_3']);
    }
    expect(f.heldByReplica('b1')).toEqual([]);
    expect(f.heldByReplica('b2')).toEqual([]);
  });

  it('ranks hosts by free HCAs, and the rank on a half-full host gets the HCAs beside its own GPUs', async () => {
    const f = await fleet();
    f.occupy('a1', 4); // GPUs 0-3 and HCAs mlx5_0-3 go to another replica
    const result = await placeGangOnHosts(f.hosts(), TP4_X2, f.io);
    if (!result.ok) throw new Error(result.reason);
    const byNode = Object.fromEntries(
      result.grants.map((g) => [g.nodeId, { rank: g.rank, gpus: g.result.gpuIndices, hcas: g.result.hcas }]),
    );
    expect(byNode).toEqual({
      a2: { rank: 0, gpus: [0, 1, 2, 3], hcas: ['mlx5_0', 'mlx5_1', 'mlx5_2', 'mlx5_3'] },
      a1: { rank: 1, gpus: [4, 5, 6, 7], hcas: ['mlx5_4', 'mlx5_5', 'mlx5_6', 'mlx5_7'] },
    });
  });

  it('prefers the faster fabric over the first by name', async () => {
    const f = await fleet([
      { nodeId: 'a1', fabric: 'ib-a', rateGbps: 200 },
      { nodeId: 'a2', fabric: 'ib-a', rateGbps: 200 },
      { nodeId: 'b1', fabric: 'ib-b' },
      { nodeId: 'b2', fabric: 'ib-b' },
    ]);
    expect(rankGangFabrics(f.hosts(), TP4_X2).fabrics.map((fabric) => fabric.fabric)).toEqual(['ib-b', 'ib-a']);
    const result = await placeGangOnHosts(f.hosts(), TP4_X2, f.io);
    expect(result.ok && result.grants.map((g) => g.nodeId)).toEqual(['b1', 'b2']);
  });

  it('is Unschedulable, not split across fabrics, when only one host of each fabric has room', async () => {
    const f = await fleet();
    f.occupy('a2', 6);
    f.occupy('b2', 8);
    const result = await placeGangOnHosts(f.hosts(), TP4_X2, f.io);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.reason).toMatch(/^not split across fabrics: /);
    expect(result.reason).toContain('fabric ib-a: 1 of 2 hosts have 4 free GPUs, 2 needed');
    expect(result.reason).toContain('fabric ib-b: 1 of 2 hosts have 4 free GPUs, 2 needed');
    // Nothing was even tried: a1 and b1 alone could have made a cross-fabric pair.
    expect(f.calls).toEqual([]);
    expect(['a1', 'a2', 'b1', 'b2'].flatMap(f.heldByReplica)).toEqual([]);
  });

  it('releases a partial reservation before it tries the next fabric', async () => {
    const f = await fleet();
    // The views are read while a2 still looks free; another replica takes it before the reserve.
    const hosts = f.hosts();
    f.occupy('a2', 8);
    const result = await placeGangOnHosts(hosts, TP4_X2, f.io);
    expect(f.calls).toEqual(['reserve a1 r0', 'reserve a2 r1', 'release a1 r0', 'reserve b1 r0', 'reserve b2 r1']);
    expect(result.ok && result.grants.map((g) => g.nodeId)).toEqual(['b1', 'b2']);
    expect(f.heldByReplica('a1')).toEqual([]);
  });

  it('holds nothing and says why when every fabric falls short at reserve time', async () => {
    const f = await fleet();
    const hosts = f.hosts();
    f.occupy('a2', 8);
    f.occupy('b2', 8);
    const result = await placeGangOnHosts(hosts, TP4_X2, f.io);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.reason).toContain('node a2 needs 4 GPUs, 0 free and healthy');
    expect(result.reason).toContain('fabric ib-a: only 1 of 2 hosts could reserve');
    expect(result.reason).toContain('fabric ib-b: only 1 of 2 hosts could reserve');
    expect(f.calls.filter((call) => call.startsWith('release'))).toEqual(['release a1 r0', 'release b1 r0']);
    expect(['a1', 'a2', 'b1', 'b2'].flatMap(f.heldByReplica)).toEqual([]);
  });

  it('releases what it holds, and the host whose reserve failed, when a reserve throws', async () => {
    const f = await fleet();
    const io: GangReservations = {
      reserve: (nodeId, rank) => (nodeId === 'a2' ? Promise.reject(new Error('update timed out')) : f.io.reserve(nodeId, rank)),
      release: f.io.release,
    };
    await expect(placeGangOnHosts(f.hosts(), TP4_X2, io)).rejects.toThrow('update timed out');
    expect(f.calls).toEqual(['reserve a1 r0', 'release a1 r0', 'release a2 r1']);
    expect(f.heldByReplica('a1')).toEqual([]);
  });

  it('keeps a gang inside the pool the deployment names', async () => {
    const f = await fleet([
      { nodeId: 'a1', fabric: 'ib-a' },
      { nodeId: 'a2', fabric: 'ib-a' },
      { nodeId: 'b1', fabric: 'ib-b', labels: { pool: 'gold' } },
      { nodeId: 'b2', fabric: 'ib-b', labels: { pool: 'gold' } },
    ]);
    const result = await placeGangOnHosts(f.hosts('gold'), { ...TP4_X2, pool: 'gold' }, f.io);
    expect(result.ok && result.grants.map((g) => g.nodeId)).toEqual(['b1', 'b2']);
    const none = await placeGangOnHosts(f.hosts('silver'), { ...TP4_X2, pool: 'silver' }, f.io);
    expect(none).toEqual({ ok: false, reason: 'a 2-node replica needs hosts on an InfiniBand fabric in pool silver; none is Ready' });
  });
});
