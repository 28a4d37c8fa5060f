// The supervisor choosing each shard's Ray block and SGLang's rendezvous span (start/ports.ts), and
// the firewall openings that follow (start/rendezvous.ts): blocks never shared by two shards or
// over a bound port, every rank's block open to its peers only (and again for the next agent),
// SGLang's span clear of other ports. Stand-in Ray and SGLang processes; the rules are recorded,
// not applied (test/e2e/net-ray.test.ts applies them).
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { RendezvousOpening } from '../../agent/supervisor/start/rendezvous.js';
import { Engine, Launcher, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { placeWithTestKey, ticketFor } from '../helpers/catalog-key.js';
import { agentHost, FAKE_ENGINE, fakeSpec, freeRange, servers, useSupervisorHarness } from '../helpers/supervisor.js';

useSupervisorHarness();

const PEERS = ['127.0.0.1', '198.18.9.11'];
/** Stands in for `ray` and SGLang's python: runs until stopped, whatever it is told. */
const IDLE = [process.execPath, '-e', 'setInterval(() => {}, 1000)', '--'];
const BLOCK = 16;

function recorder() {
  const applied: RendezvousOpening[][] = [];
  return { applied, firewall: { apply: async (o: RendezvousOpening[]) => void applied.push(o) } };
}

/** A shard of a two-node replica, placed with its peers in the ticket. */
function twoNodeShard(node: string, id: string, rank: number, gpu: number, engine: Engine, launcher: Launcher): StartShard {
  const spec = fakeSpec(node, id, [], [gpu]);
  spec.replicaId = `replica/demo/${id}`;
  spec.nnodes = 2;
  spec.rank = rank;
  spec.leaderAddress = rank === 0 ? '' : '127.0.0.1';
  spec.leaderPort = rank === 0 ? 0 : 6379;
  spec.profile!.engine = engine;
  spec.profile!.launcher = launcher;
  return placeWithTestKey(spec, { ...ticketFor(spec), peers: PEERS });
}

async function bind(port: number): Promise<void> {
  const server = createServer();
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
}

describe("each Ray shard's own ports", () => {
  it('gives two Ray shards blocks of their own, skips a block with a bound port, and opens each to its peers only', async () => {
    const host = await agentHost('ray-ports', 4);
    let range = await freeRange(4 * BLOCK);
    while (range.from <= host.portRange.to && host.portRange.from <= range.to) range = await freeRange(4 * BLOCK);
    const options = {
      engineContext: { fakeEngineCommand: FAKE_ENGINE, rayCommand: IDLE, rayWorkerPorts: range },
      rayPortsPerShard: BLOCK,
    };
    const first = recorder();
    const { sup } = host.startAgent({ ...options, rendezvousFirewall: first.firewall });
    await sup.start(twoNodeShard(host.node, 'a.r1', 1, 0, Engine.FAKE, Launcher.RAY));
    // Another program holds a port of the second block: the next shard gets the third.
    await bind(range.from + BLOCK + 3);
    await sup.start(twoNodeShard(host.node, 'b.r1', 1, 1, Engine.FAKE, Launcher.RAY));
    const a = { from: range.from, to: range.from + BLOCK - 1 };
    const b = { from: range.from + 2 * BLOCK, to: range.from + 3 * BLOCK - 1 };
    const openings = [
      { replicaId: 'replica/demo/a.r1', shardId: 'a.r1', ports: [a], peers: PEERS },
      { replicaId: 'replica/demo/b.r1', shardId: 'b.r1', ports: [b], peers: PEERS },
    ];
    expect(first.applied.at(-1)).toEqual(openings);

    // The next agent rebuilds the same rules from the shards' records.
    sup.close();
    const second = recorder();
    const next = host.startAgent({ ...options, rendezvousFirewall: second.firewall });
    expect((await next.sup.recover()).adopted).toHaveLength(2);
    expect(second.applied.at(-1)).toEqual(openings);
  });

  it("keeps SGLang's rendezvous span (its port and the ZMQ ports above it) clear of bound and engine ports, and guards it whole", async () => {
    const host = await agentHost('sglang-span', 48);
    const { from } = host.portRange;
    const { applied, firewall } = recorder();
    const { sup } = host.startAgent({
      engineContext: { fakeEngineCommand: FAKE_ENGINE, pythonCommand: IDLE },
      rendezvousFirewall: firewall,
    });
    await bind(from + 5);
    const rank0 = await sup.start(twoNodeShard(host.node, 's.r0', 0, 0, Engine.SGLANG, Launcher.NATIVE));
    const leader = rank0.spec!.leaderPort;
    const span = { from: leader, to: leader + 15 };
    const httpPort = rank0.status!.httpPort;
    expect(span.to).toBeLessThanOrEqual(host.portRange.to);
    for (const taken of [from + 5, httpPort]) expect(taken < span.from || taken > span.to).toBe(true);
    expect(applied.at(-1)).toEqual([{ replicaId: 'replica/demo/s.r0', shardId: 's.r0', ports: [span], peers: PEERS }]);
    // A later engine's HTTP port is not taken from the span, bound or not.
    const later = await sup.start(fakeSpec(host.node, 'single.r0', ['--load-time', '60'], [1]));
    const laterPort = later.status!.httpPort;
    expect(laterPort < span.from || laterPort > span.to).toBe(true);
  });
});
