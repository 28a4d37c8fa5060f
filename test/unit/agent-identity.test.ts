// An agent's signature over its registration, as the control worker checks it: it survives the
// trip through Temporal's payloads, binds the address and the node, expires, and is acted on
// only under a key the catalog key enrolled (common/agent-identity.ts, activities/registration-check.ts).
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { RegisterSchema, type Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { GPUSchema } from '../../proto/gen/llmgw/v1/gpu_pb.js';
import { payloadConverter } from '../../common/payload-converter.js';
import { newKeyPairLines, parseKeyLine, type CatalogKeyring } from '../../common/catalog-key.js';
import {
  AGENT_KEY_FILE,
  loadOrCreateAgentKey,
  registrationProblem,
  signEnrollment,
  signRegistration,
} from '../../common/agent-identity.js';
import { createRegistrationCheckActivities } from '../../activities/registration-check.js';
import { writeFileSync } from 'node:fs';
import { applyRegister, initialNodeState, reserve, viewOf } from '../../workflows/node/state.js';
import { shownNodeState } from '../../common/node-types.js';

function catalogRing(): { ring: CatalogKeyring; file: string } {
  const line = newKeyPairLines().privateLine;
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-ident-')), 'catalog.key');
  writeFileSync(file, `${line}\n`, { mode: 0o600 });
  const key = parseKeyLine(line, 'test');
  return { ring: { file, signing: key, all: [key] }, file };
}

function report(nodeId: string, address = '10.0.0.5'): Register {
  return create(RegisterSchema, {
    nodeId,
    hostname: 'gpu-5',
    managementAddress: address,
    labels: { fabric: 'ib-a', '1': 'numeric key' },
    gpus: [create(GPUSchema, { index: 0, name: 'H100' })],
    managedGpus: [0],
    reportedAt: new Date().toISOString(),
  });
}

/** As the node workflow receives it: through the payload converter. */
function carried(register: Register): Register {
  return payloadConverter.fromPayload(payloadConverter.toPayload(register)!);
}

describe('agent identity', () => {
  it('keeps its key pair in the state dir, 0600, across starts', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-agent-'));
    const first = loadOrCreateAgentKey(dir);
    expect(first.publicKey).toMatch(/^ed25519-public:/);
    expect(statSync(join(dir, AGENT_KEY_FILE)).mode & 0o777).toBe(0o600);
    expect(loadOrCreateAgentKey(dir).publicKey).toBe(first.publicKey);
  });

  it('signs a registration that verifies after the payload round trip, and not with another address or node', () => {
    const identity = loadOrCreateAgentKey(mkdtempSync(join(tmpdir(), 'llmgw-agent-')));
    const genuine = report('n1');
    const proof = signRegistration(genuine, identity);
    const now = Date.now();
    expect(registrationProblem('n1', carried(genuine), proof, identity.publicKey, now)).toBeUndefined();
    expect(registrationProblem('n1', carried({ ...genuine, managementAddress: '10.6.6.6' }), proof, identity.publicKey, now)).toMatch(
      /does not verify/,
    );
    expect(registrationProblem('n2', carried(genuine), proof, identity.publicKey, now)).toMatch(/names node n1, not n2/);
    expect(registrationProblem('n1', genuine, proof, loadOrCreateAgentKey(mkdtempSync(join(tmpdir(), 'x-'))).publicKey, now)).toMatch(
      /not the enrolled key/,
    );
    expect(registrationProblem('n1', genuine, proof, identity.publicKey, now + 11 * 60_000)).toMatch(/replayed, or the host's clock/);
  });

  it('acts only on what the enrolled key signed, newer than the last, under an enrollment the catalog key signed', async () => {
    const { ring, file } = catalogRing();
    const check = createRegistrationCheckActivities(file);
    const identity = loadOrCreateAgentKey(mkdtempSync(join(tmpdir(), 'llmgw-agent-')));
    const genuine = report('n1');
    const enrollment = signEnrollment('n1', identity.publicKey, ring);

    const unenrolled = await check.checkRegistration({ nodeId: 'n1', proof: signRegistration(genuine, identity) }, genuine);
    expect(unenrolled).toMatchObject({ verdict: 'unenrolled', why: expect.stringMatching(/llmgw nodes enroll n1/) });

    // Carried by a self-enrolling agent (llmgw up, tests): verified, and the node holds it from then on.
    const self = signRegistration(genuine, identity, enrollment);
    const first = await check.checkRegistration({ nodeId: 'n1', proof: self }, carried(genuine));
    expect(first).toMatchObject({ verdict: 'verified', enrollment });

    const held = { nodeId: 'n1', enrollment, lastSignedAt: self.signedAt };
    expect(await check.checkRegistration({ ...held, proof: self }, genuine)).toMatchObject({
      verdict: 'rejected',
      why: expect.stringMatching(/replay/),
    });
    expect(await check.checkRegistration(held, genuine)).toMatchObject({ verdict: 'rejected', why: expect.stringMatching(/unsigned/) });
    await new Promise((resolve) => setTimeout(resolve, 2));
    expect(await check.checkRegistration({ ...held, proof: signRegistration(genuine, identity) }, genuine)).toMatchObject({
      verdict: 'verified',
    });

    // An enrollment not signed with the catalog key, or for another node, enrolls nothing.
    const { ring: other } = catalogRing();
    const forged = signEnrollment('n1', identity.publicKey, other);
    expect(await check.checkEnrollment({ nodeId: 'n1', enrollment: forged })).toMatchObject({ ok: false });
    expect(await check.checkEnrollment({ nodeId: 'n2', enrollment })).toMatchObject({
      ok: false,
      why: expect.stringMatching(/n1, not n2/),
    });
    expect(await check.checkEnrollment({ nodeId: 'n1', enrollment })).toEqual({ ok: true });
    const attacker = loadOrCreateAgentKey(mkdtempSync(join(tmpdir(), 'llmgw-agent-')));
    expect(
      await check.checkRegistration({ nodeId: 'n1', enrollment: forged, proof: signRegistration(genuine, attacker, forged) }, genuine),
    ).toMatchObject({ verdict: 'unenrolled' });
  });

  it("no longer takes an enrollment once its key left the worker's key file, without a restart", async () => {
    const { file } = catalogRing();
    const kept = readFileSync(file, 'utf8');
    const removed = newKeyPairLines().privateLine;
    writeFileSync(file, `${kept}${removed}\n`);
    const check = createRegistrationCheckActivities(file);
    const identity = loadOrCreateAgentKey(mkdtempSync(join(tmpdir(), 'llmgw-agent-')));
    const key = parseKeyLine(removed, 'test');
    const enrollment = signEnrollment('n1', identity.publicKey, { file, signing: key, all: [key] });
    expect(await check.checkEnrollment({ nodeId: 'n1', enrollment })).toEqual({ ok: true });
    writeFileSync(file, kept);
    expect(await check.checkEnrollment({ nodeId: 'n1', enrollment })).toMatchObject({ ok: false });
  });

  it('places nothing on an unenrolled node, and says how to enroll it', () => {
    const state = initialNodeState('n1');
    applyRegister(state, report('n1'), new Date().toISOString());
    state.enrolled = false;
    state.offeredKey = 'ed25519-public:abc';
    expect(shownNodeState(viewOf(state))).toBe('Unenrolled');
    expect(viewOf(state).reason).toMatch(/Unenrolled: run `llmgw nodes enroll n1 ed25519-public:abc`/);
    const refused = reserve(state, { shardId: 's1', replicaId: 'replica/d/1', count: 1 }, new Date().toISOString());
    expect(refused).toMatchObject({ ok: false, reason: expect.stringMatching(/n1 is Unenrolled: run `llmgw nodes enroll n1/) });
    // A worker that trusts unenrolled agents (--trust-unenrolled-agents, the 0.2.0 upgrade window).
    expect(
      reserve(state, { shardId: 's1', replicaId: 'replica/d/1', count: 1, allowUnenrolled: true }, new Date().toISOString()),
    ).toMatchObject({ ok: true, managementAddress: '10.0.0.5' });
    state.enrolled = true;
    expect(shownNodeState(viewOf(state))).toBe('Ready');
  });
});
