// The supervisor keeping the rendezvous firewall in step with its shards (start/rendezvous.ts):
// rank 0 of a multi-node replica has its leader port open to the ticket's peers before anything
// is spawned, the rules go with a stop, a restarted agent rebuilds them for what it adopts, and
// a shard whose ticket names no peers is left open with a warning. Real fake engines; the
// firewall itself (nft) is recorded, not applied: test/e2e/net-ray.test.ts applies it.
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { StopShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { RendezvousOpening } from '../../agent/supervisor/start/rendezvous.js';
import { placeWithTestKey, ticketFor } from '../helpers/catalog-key.js';
import { agentHost, fakeSpec, useSupervisorHarness } from '../helpers/supervisor.js';

useSupervisorHarness();

const PEERS = ['127.0.0.1', '198.18.9.11'];

/** Rank 0 of a 2-node fake replica (its worker rank never joins: it need not serve). */
function leaderSpec(node: string, peers: string[] | undefined) {
  const spec = fakeSpec(node, 'big.1.r0.a1', ['--load-time', '60']);
  spec.nnodes = 2;
  spec.leaderAddress = '';
  if (peers) placeWithTestKey(spec, { ...ticketFor(spec), peers });
  return spec;
}

function recorder() {
  const applied: RendezvousOpening[][] = [];
  return { applied, firewall: { apply: async (o: RendezvousOpening[]) => void applied.push(o) } };
}

describe('rendezvous rules follow the shards', () => {
  it("open rank 0's leader port to its peers before the spawn, keep them across an agent restart, and drop them with the stop", async () => {
    const host = await agentHost('rendezvous', 6);
    const first = recorder();
    const seenAtSpawn: RendezvousOpening[][] = [];
    const { sup } = host.startAgent({
      rendezvousFirewall: first.firewall,
      beforeSpawn: () => void seenAtSpawn.push(first.applied.at(-1) ?? []),
    });
    const started = await sup.start(leaderSpec(host.node, PEERS));
    const port = started.spec!.leaderPort;
    expect(port).toBeGreaterThanOrEqual(host.portRange.from);
    const opening = { replicaId: 'replica/demo/1', shardId: 'big.1.r0.a1', ports: [{ from: port, to: port }], peers: PEERS };
    expect(seenAtSpawn).toEqual([[opening]]);

    // The next agent adopts the engine and its rules (none of the previous agent's are assumed).
    sup.close();
    const second = recorder();
    const next = host.startAgent({ rendezvousFirewall: second.firewall });
    const recovered = await next.sup.recover();
    expect(recovered.adopted).toHaveLength(1);
    expect(second.applied.at(-1)).toEqual([opening]);

    await next.sup.stop(create(StopShardSchema, { shardId: 'big.1.r0.a1', graceSeconds: 1 }));
    expect(second.applied.at(-1)).toEqual([]);
  });

  it('leaves a rank 0 without peers in its ticket open, and says so', async () => {
    const host = await agentHost('rendezvous-open', 6);
    const { applied, firewall } = recorder();
    const { sup, logs } = host.startAgent({ rendezvousFirewall: firewall });
    const started = await sup.start(leaderSpec(host.node, undefined));
    expect(applied.at(-1)).toEqual([]);
    expect(logs.join('\n')).toContain(`its rendezvous port(s) ${started.spec!.leaderPort} are open to anyone`);
  });
});
