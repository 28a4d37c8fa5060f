// The control worker's MAC on the GPU Updates that free or take GPUs (common/node-request-mac.ts)
// and the agent's rule on who may stop a ticketed shard (agent/stop-check.ts): a proof holds only
// for the same node, Update and request, unexpired, made with a key that can sign; a stop only
// from the ticket's replica chain, its rebuild on our queue, or reconcileNode on our queue.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ensureCatalogKeyFile, publicKeyFileOf, readCatalogKeys, readVerifyingKeys } from '../../common/catalog-key.js';
import { NODE_REQUEST_TTL_MS, signNodeRequest, verifyNodeRequest } from '../../common/node-request-mac.js';
import { NODE_REQUEST_PROOF_FORM } from '../../common/node-types.js';
import { signPlacementTicket } from '../../common/placement-ticket.js';
import { sealCarried } from '../../common/carried-seal.js';
import { stopRefusal, type StopCaller } from '../../agent/stop-check.js';
import { demoTicket } from '../helpers/tickets.js';

function keyFile(): string {
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-node-mac-')), 'catalog.key');
  ensureCatalogKeyFile(file);
  return file;
}

describe('node request MAC', () => {
  const file = keyFile();
  const ring = readCatalogKeys(file);
  const now = 1_800_000_000_000;
  const release = { shardId: 'demo.1.r0.a1' };

  it('holds for the same node, Update and request, unexpired, and for nothing else', () => {
    const proof = signNodeRequest(ring, 'gpu-1', 'release', release, now);
    expect(proof).toMatch(NODE_REQUEST_PROOF_FORM);
    expect(verifyNodeRequest(ring, 'gpu-1', 'release', { ...release, proof }, now + 1_000)).toEqual({ ok: true });
    const refused = (request: object, nodeId = 'gpu-1', kind: 'release' | 'claim' = 'release', at = now) =>
      verifyNodeRequest(ring, nodeId, kind, request, at);
    expect(refused({ ...release, proof }, 'gpu-2')).toMatchObject({
      ok: false,
      why: expect.stringMatching(/not made for this release of node gpu-2/),
    });
    expect(refused({ shardId: 'other.1.r0.a1', proof })).toMatchObject({ ok: false });
    expect(refused({ ...release, proof }, 'gpu-1', 'claim')).toMatchObject({ ok: false });
    expect(refused({ ...release, proof }, 'gpu-1', 'release', now + NODE_REQUEST_TTL_MS + 1)).toMatchObject({
      ok: false,
      why: expect.stringMatching(/expired/),
    });
    expect(refused(release)).toMatchObject({ ok: false, why: expect.stringMatching(/carries no proof/) });
    expect(refused({ ...release, proof: 'v1.x.y' })).toMatchObject({ ok: false, why: expect.stringMatching(/not a v1/) });
    // A later expiry written into a genuine proof breaks its MAC.
    const [v, id, expires, mac] = proof.split('.');
    expect(refused({ ...release, proof: [v, id, Number(expires) + 60_000, mac].join('.') })).toMatchObject({ ok: false });
  });

  it('is not the carried-state seal, and a verifier (public) key file cannot make or check it', () => {
    const seal = sealCarried(ring, { workflowType: 'node', workflowId: 'node/gpu-1', firstExecutionRunId: 'a', runId: 'b' }, release);
    const mac = seal.split('.')[2];
    const expiresAt = now + NODE_REQUEST_TTL_MS;
    expect(
      verifyNodeRequest(ring, 'gpu-1', 'release', { ...release, proof: `v1.${ring.signing!.id}.${expiresAt}.${mac}` }, now),
    ).toMatchObject({ ok: false });
    const verifier = readVerifyingKeys(publicKeyFileOf(file));
    expect(() => signNodeRequest(verifier, 'gpu-1', 'release', release, now)).toThrow(/no key that can sign/);
    const proof = signNodeRequest(ring, 'gpu-1', 'release', release, now);
    expect(verifyNodeRequest(verifier, 'gpu-1', 'release', { ...release, proof }, now)).toMatchObject({ ok: false });
  });
});

describe('who may stop a ticketed shard', () => {
  const ring = readCatalogKeys(keyFile());
  const ticket = signPlacementTicket(demoTicket({ chain: 'chain-1' }), ring);
  const caller = (over: Partial<StopCaller>): StopCaller => ({
    workflowId: 'replica/demo/1',
    workflowType: 'replica',
    taskQueue: 'llmgw',
    chain: 'chain-1',
    ...over,
  });

  it("allows the ticket's replica chain, its rebuild on our queue and reconcileNode on our queue", () => {
    expect(stopRefusal('demo.1.r0.a1', ticket, caller({}))).toBeUndefined();
    // The chain that placed it, whatever its type (tests send starts from workflows of their own).
    expect(stopRefusal('demo.1.r0.a1', ticket, caller({ workflowType: 'agentSession', taskQueue: 'tests' }))).toBeUndefined();
    expect(stopRefusal('demo.1.r0.a1', ticket, caller({ chain: 'rebuilt' }))).toBeUndefined();
    expect(
      stopRefusal('demo.1.r0.a1', ticket, caller({ workflowId: 'reconcile/gpu-1/x', workflowType: 'reconcileNode', chain: 'r' })),
    ).toBeUndefined();
  });

  it('refuses anyone else, naming who may', () => {
    const refusals = [
      caller({ workflowId: 'attacker', workflowType: 'agentCall', taskQueue: 'mine', chain: 'a' }),
      caller({ workflowId: 'replica/other/1', chain: 'b' }),
      caller({ chain: 'rebuilt', taskQueue: 'mine' }),
      caller({ chain: 'rebuilt', workflowType: 'agentCall' }),
      caller({ workflowId: 'reconcile/gpu-1/x', workflowType: 'reconcileNode', taskQueue: 'mine', chain: 'r' }),
    ].map((c) => stopRefusal('demo.1.r0.a1', ticket, c));
    for (const why of refusals) expect(why).toMatch(/only that replica .* or reconcileNode on llmgw may stop it/);
  });

  it('keeps the old behaviour for a shard with no ticket (placed by 0.2.0) or no calling run', () => {
    expect(stopRefusal('demo.1.r0.a1', '', caller({ workflowId: 'attacker', chain: 'a' }))).toBeUndefined();
    expect(stopRefusal('demo.1.r0.a1', undefined, caller({ workflowId: 'attacker', chain: 'a' }))).toBeUndefined();
    expect(stopRefusal('demo.1.r0.a1', ticket, undefined)).toBeUndefined();
  });
});
