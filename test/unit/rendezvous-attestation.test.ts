// A worker rank's leader port (issue 37): rank 0's agent signs the rendezvous port it chose in its
// startShard answer (agent/endpoint-attester.ts), and a worker rank whose ticket names the
// leader's enrolled key joins only that port (common/placement-ticket.ts, ticketMismatches).
// Anyone who completes rank 0's startShard with another port gets the worker refused.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { AGENT_KEY_FILE, loadOrCreateAgentKey, type AgentIdentity } from '../../common/agent-identity.js';
import { newKeyPairLines, parseKeyLine, type CatalogKeyring } from '../../common/catalog-key.js';
import { signEndpointAttestation } from '../../common/endpoint-attestation.js';
import {
  readPlacementTicket,
  signPlacementTicket,
  ticketMismatches,
  verifyPlacementTicket,
  type PlacementTicket,
} from '../../common/placement-ticket.js';
import { createRendezvousAttester } from '../../agent/endpoint-attester.js';
import { RunningShardSchema, ShardStatusSchema, StartShardSchema, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { demoTicket } from '../helpers/tickets.js';

const agent = (): AgentIdentity => loadOrCreateAgentKey(mkdtempSync(join(tmpdir(), 'llmgw-rdv-')));
const catalogKey = parseKeyLine(newKeyPairLines().privateLine, 'a test catalog key');
const catalog: CatalogKeyring = { file: 'catalog.key', signing: catalogKey, all: [catalogKey] };

const LEADER = { nodeId: 'gpu-1', address: '198.18.0.7' };
const PORT = 30150;

function ticket(rank: number, over: Partial<PlacementTicket> = {}): PlacementTicket {
  return demoTicket({
    shardId: `demo.1.r${rank}.a1`,
    nodeId: rank === 0 ? 'gpu-1' : 'gpu-2',
    rank,
    nnodes: 2,
    address: rank === 0 ? LEADER.address : '198.18.0.8',
    leaderAddress: LEADER.address,
    leaderNode: LEADER.nodeId,
    peers: [LEADER.address, '198.18.0.8'],
    servedName: '',
    ...over,
  });
}

function start(t: PlacementTicket, leaderPort: number, leaderAttestation = ''): StartShard {
  return create(StartShardSchema, {
    replicaId: t.replicaId,
    notifyWorkflowId: t.replicaId,
    shardId: t.shardId,
    nodeId: t.nodeId,
    rank: t.rank,
    nnodes: t.nnodes,
    gpuIndices: t.gpus,
    leaderAddress: t.leaderAddress,
    leaderPort,
    deployment: t.deployment,
    placementTicket: signPlacementTicket(t, catalog),
    leaderAttestation,
  });
}

/** What rank 0's agent answers startShard with, signed as it signs it. */
function leaderAnswer(leader: AgentIdentity, leaderKey: string | undefined): string {
  const t = ticket(0, leaderKey ? { leaderKey } : {});
  const running = create(RunningShardSchema, {
    spec: start(t, PORT),
    status: create(ShardStatusSchema, { shardId: t.shardId, rank: 0, leaderPort: PORT }),
  });
  return createRendezvousAttester(leader, LEADER)(running).status!.leaderAttestation;
}

describe('rendezvous attestation', () => {
  it('a ticket keeps the leader key (and keyChain) through signing, and old tickets still parse', () => {
    const both = ticket(1, { keyChain: 'run-0', leaderKey: 'ed25519-public:abc' });
    const verdict = verifyPlacementTicket(signPlacementTicket(both, catalog), catalog.all);
    expect(verdict.ok && verdict.ticket).toMatchObject({ keyChain: 'run-0', leaderKey: 'ed25519-public:abc' });
    const onlyKey = ticket(1, { leaderKey: 'ed25519-public:abc' });
    expect(readPlacementTicket(signPlacementTicket(onlyKey, catalog))).toMatchObject({ leaderKey: 'ed25519-public:abc' });
    expect(readPlacementTicket(signPlacementTicket(ticket(1), catalog))?.leaderKey).toBeUndefined();
  });

  it("a worker rank joins the port rank 0's agent signed, and refuses any other", () => {
    const leader = agent();
    const t = ticket(1, { leaderKey: leader.publicKey });
    const attestation = leaderAnswer(leader, leader.publicKey);
    expect(attestation).not.toBe('');
    expect(ticketMismatches(t, start(t, PORT, attestation), {})).toEqual([]);

    const refused = (leaderPort: number, text: string): string => ticketMismatches(t, start(t, leaderPort, text), {}).join('; ');
    expect(refused(PORT + 1, attestation)).toMatch(/leader port 30151 is not the one rank 0's agent chose: .*attests port 30150/);
    expect(refused(PORT, '')).toMatch(/no endpoint attestation/);
    expect(refused(PORT, leaderAnswer(agent(), agent().publicKey))).toMatch(/does not verify/);
    // The same fields signed as an engine's endpoint, not as a rendezvous, do not pass for one.
    const keyring = { file: AGENT_KEY_FILE, signing: leader.key, all: [leader.key] };
    const endpoint = signEndpointAttestation(
      { ...LEADER, replicaId: t.replicaId, chain: t.chain, shardId: 'demo.1.r0.a1', port: PORT, issuedAt: Date.now() },
      keyring,
    );
    expect(refused(PORT, endpoint)).toMatch(/does not verify/);
    // Signed for another replica's chain (a replica id used again): refused.
    const other = createRendezvousAttester(
      leader,
      LEADER,
    )(
      create(RunningShardSchema, {
        spec: start(ticket(0, { leaderKey: leader.publicKey, chain: 'run-other' }), PORT),
        status: create(ShardStatusSchema, { rank: 0, leaderPort: PORT }),
      }),
    ).status!.leaderAttestation;
    expect(refused(PORT, other)).toMatch(/attests chain "run-other"/);
  });

  it("an unenrolled leader's ticket names no key: its gang starts as before", () => {
    expect(leaderAnswer(agent(), undefined)).toBe('');
    const t = ticket(1);
    expect(ticketMismatches(t, start(t, PORT), {})).toEqual([]);
  });
});
