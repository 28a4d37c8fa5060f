// Multi-node replicas end to end: four simulated hosts of class GANG, two cabled to fabric
// ib-a and two to ib-b, real agents and real multi-rank fake engines (rank 0 serves HTTP
// once every worker rank has joined its group). A TP8×PP2 replica is placed as a gang on
// one fabric or not at all, becomes Ready only as a whole, restarts as a whole when a rank
// dies, and is re-placed as a whole when a rank's host is lost.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { join } from 'node:path';
import { readEnviron, signalGroup } from '../../agent/supervisor/processes/proc.js';
import { connectAdmin } from '../../agent/admin/client.js';
import { cordonUpdate, deploymentStatusQuery, uncordonUpdate } from '../../workflows/definitions.js';
import type { DeploymentView, ReplicaView } from '../../common/replica-types.js';
import { enginesOf, eventually, INVENTORIES, type LlmgwProcess, runLlmgw, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const hosts = {
  a1: { id: uniqueId('gang-a1'), inventory: 'gang-ib-a.yaml' },
  a2: { id: uniqueId('gang-a2'), inventory: 'gang-ib-a.yaml' },
  b1: { id: uniqueId('gang-b1'), inventory: 'gang-ib-b.yaml' },
  b2: { id: uniqueId('gang-b2'), inventory: 'gang-ib-b.yaml' },
};
const nodeIds = Object.values(hosts).map((h) => h.id);
const agents = new Map<string, { proc: LlmgwProcess; stateDir: string }>();
const name = uniqueId('gang');
const fleet = useIsolatedFleet();

async function startAgent(nodeId: string, inventory: string): Promise<void> {
  const known = agents.get(nodeId);
  // A short lost grace, so that "a host left down" is decided within the test.
  const started = await fleet.agent(nodeId, {
    inventory: join(INVENTORIES, inventory),
    stateDir: known?.stateDir,
    extra: ['--lost-grace-seconds', '10'],
  });
  agents.set(nodeId, started);
}

const status = (): Promise<DeploymentView> => fleet.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
const replicaOf = async (): Promise<ReplicaView | undefined> =>
  (await status()).replicas.find((r) => r.phase !== 'Stopped' && r.phase !== 'Failed');
const cordon = (nodeId: string) =>
  fleet.client.workflow.getHandle(`node/${nodeId}`).executeUpdate(cordonUpdate, { args: [{ reason: 'test' }] });
const uncordon = (nodeId: string) => fleet.client.workflow.getHandle(`node/${nodeId}`).executeUpdate(uncordonUpdate, { args: [] });

/** The engine process of one shard (its process group is the whole rank). */
function engineOf(shardId: string): number | undefined {
  return enginesOf(nodeIds).find((e) => e.env.LLMGW_SHARD_ID === shardId && readEnviron(e.pid)?.LLMGW_SHARD_ID === shardId)?.pid;
}

async function readyReplica(what: string, accept: (r: ReplicaView) => boolean = () => true): Promise<ReplicaView> {
  return eventually(
    what,
    async () => {
      const view = await status();
      const replica = view.replicas.find((r) => r.phase === 'Ready');
      return view.phase === 'Ready' && replica && accept(replica) ? replica : undefined;
    },
    90_000,
    250,
  );
}

beforeAll(async () => {
  for (const host of Object.values(hosts)) await startAgent(host.id, host.inventory);
});

afterAll(async () => {
  await runLlmgw(['undeploy', name]).catch(() => undefined);
});

describe('multi-node replicas', () => {
  it('places a 2-node replica on two hosts of one fabric with the HCAs beside its GPUs, and is Unschedulable rather than split across fabrics', async () => {
    // One host of each fabric out of the running: each fabric has room on one host only.
    await cordon(hosts.a2.id);
    await cordon(hosts.b2.id);
    const deployed = await runLlmgw(['deploy', 'gang', '--name', name, '--replicas', '1']);
    expect(deployed.code, deployed.output).toBe(0);
    const waiting = await eventually(
      'Unschedulable',
      async () => {
        const replica = await replicaOf();
        return replica?.phase === 'Unschedulable' ? replica : undefined;
      },
      30_000,
    );
    expect(waiting.reason).toMatch(/not split across fabrics/);
    expect(waiting.reason).toMatch(/ib-a/);
    expect(waiting.reason).toMatch(/ib-b/);
    expect(enginesOf(nodeIds)).toEqual([]);

    await uncordon(hosts.a2.id);
    const replica = await readyReplica('Ready on fabric ib-a');
    expect(replica.nodes.sort()).toEqual([hosts.a1.id, hosts.a2.id].sort());
    const ranks = [...replica.shards].sort((a, b) => a.rank - b.rank);
    expect(ranks.map((s) => s.rank)).toEqual([0, 1]);
    for (const shard of ranks) {
      expect(shard.gpuIndices.sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      // The HCA beside each GPU (PIX), never the Ethernet ports mlx5_8/9.
      expect(shard.hcas.sort()).toEqual(['mlx5_0', 'mlx5_1', 'mlx5_2', 'mlx5_3', 'mlx5_4', 'mlx5_5', 'mlx5_6', 'mlx5_7']);
      expect(shard.state).toBe('Ready');
    }
    // Each rank runs with its leader's address and the port rank 0's agent chose.
    const worker = readEnviron(engineOf(ranks[1]!.shardId)!)!;
    expect(worker.NCCL_IB_HCA).toBe(ranks[1]!.hcas.join(','));
    // Bootstrap traffic on the interface that carries the agent's address (loopback here).
    expect(worker.NCCL_SOCKET_IFNAME).toBe('lo');
    expect(worker.GLOO_SOCKET_IFNAME).toBe('lo');
    const shown = await runLlmgw(['status', name]);
    expect(shown.output).toMatch(/rank 0 .*Ready/s);
    expect(shown.output).toMatch(/rank 1/);
    expect(shown.output).toContain(ranks[1]!.shardId);
  });

  it('restarts the whole replica when rank 1’s engine is killed -9, and it is Ready again', async () => {
    const before = (await replicaOf())!;
    const rank1 = before.shards.find((s) => s.rank === 1)!;
    const rank0 = before.shards.find((s) => s.rank === 0)!;
    signalGroup(engineOf(rank1.shardId)!, 'SIGKILL');
    const after = await readyReplica('Ready again after a restart', (r) => r.restarts > before.restarts);
    const pids = after.shards.map((s) => s.pid);
    expect(pids).not.toContain(rank0.pid);
    expect(pids).not.toContain(rank1.pid);
    expect(after.nodes.sort()).toEqual(before.nodes.sort());
  });

  it('re-places the whole replica on another pair when rank 1’s host is lost, and the host’s return ends what it left running', async () => {
    const before = (await replicaOf())!;
    const rank1 = before.shards.find((s) => s.rank === 1)!;
    const survivor = before.shards.find((s) => s.rank === 0)!.nodeId;
    await uncordon(hosts.b2.id);
    const lostAgent = agents.get(rank1.nodeId)!;
    await lostAgent.proc.kill9();
    const after = await readyReplica('Ready on fabric ib-b', (r) => r.nodes.includes(hosts.b1.id) && r.nodes.includes(hosts.b2.id));
    expect(after.nodes.sort()).toEqual([hosts.b1.id, hosts.b2.id].sort());
    // The surviving rank on ib-a was stopped. (The lost host's worker rank exits by itself
    // once its leader is gone, as a real engine's would; only its record is left.)
    await eventually('rank 0 on the surviving host stopped', () => enginesOf([survivor]).length === 0, 30_000);
    // The agent comes back: its registration's reconciliation stops what nobody wants.
    const inventory = Object.values(hosts).find((h) => h.id === rank1.nodeId)!.inventory;
    await startAgent(rank1.nodeId, inventory);
    const admin = connectAdmin(/admin API on (\S+)/.exec(agents.get(rank1.nodeId)!.proc.output())![1]!);
    try {
      await eventually(
        'the lost host reports nothing left of the old replica',
        async () => (await admin.describe()).register!.runningShards.length === 0,
        30_000,
      );
    } finally {
      admin.close();
    }
    expect(enginesOf([rank1.nodeId])).toEqual([]);
    expect((await status()).phase).toBe('Ready');
  });
});
