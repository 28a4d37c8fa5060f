// An agent's endpoint attestation, as the route signer checks it: it survives the trip through
// Temporal's payloads (waitHealthy's ShardStatus), verifies only under the enrolled key, and binds
// node, replica, run chain, shard, address and the exact port (common/endpoint-attestation.ts).
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { ShardStatusSchema, type ShardStatus } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { payloadConverter } from '../../common/payload-converter.js';
import {
  ATTESTATION_CLOCK_SKEW_MS,
  endpointAttestationProblem,
  signEndpointAttestation,
  type AttestedEndpoint,
} from '../../common/endpoint-attestation.js';
import { agentRing as ring, chatAttestation, newAgent as agent } from '../helpers/signers.js';

const now = Date.now();
const said = chatAttestation(now);
const expected: AttestedEndpoint = { ...said, ticketIssuedAt: now - 1_000 };

describe('endpoint attestation', () => {
  it('verifies under the enrolled key after a trip through a ShardStatus payload', () => {
    const identity = agent();
    const status = create(ShardStatusSchema, { shardId: said.shardId, endpointAttestation: signEndpointAttestation(said, ring(identity)) });
    const back = payloadConverter.fromPayload<ShardStatus>(payloadConverter.toPayload(status));
    expect(endpointAttestationProblem(back.endpointAttestation, identity.publicKey, expected)).toBeUndefined();
  });

  it('refuses another port, host, chain, shard, replica or node, naming each', () => {
    const identity = agent();
    const text = signEndpointAttestation(said, ring(identity));
    for (const [field, value] of [
      ['port', 30008],
      ['address', '10.0.0.6'],
      ['chain', 'run-other'],
      ['shardId', 'chat.3.r0.a2'],
      ['replicaId', 'replica/chat/4'],
      ['nodeId', 'gpu-6'],
    ] as const) {
      expect(endpointAttestationProblem(text, identity.publicKey, { ...expected, [field]: value })).toMatch(
        new RegExp(`attests ${field} .*, not ${JSON.stringify(value)}`),
      );
    }
  });

  it('refuses one signed by another key, an altered one, none, and one from before the ticket was renewed', () => {
    const identity = agent();
    const text = signEndpointAttestation(said, ring(identity));
    expect(endpointAttestationProblem(signEndpointAttestation(said, ring(agent())), identity.publicKey, expected)).toMatch(
      /does not verify against node gpu-5's enrolled key \(unknown-key\)/,
    );
    // The same signature under a body naming another port (fields in their signed order).
    const body = Buffer.from(JSON.stringify(Object.entries({ ...said, port: 30008 }))).toString('base64url');
    const altered = `${body}.${text.slice(text.indexOf('.') + 1)}`;
    expect(endpointAttestationProblem(altered, identity.publicKey, { ...expected, port: 30008 })).toMatch(/does not verify .*\(mismatch\)/);
    expect(endpointAttestationProblem('', identity.publicKey, expected)).toMatch(/no endpoint attestation/);
    const old = signEndpointAttestation({ ...said, issuedAt: now - ATTESTATION_CLOCK_SKEW_MS - 60_000 }, ring(identity));
    expect(endpointAttestationProblem(old, identity.publicKey, expected)).toMatch(/before its placement ticket was last renewed/);
  });
});
