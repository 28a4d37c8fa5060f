// The framing every signed statement shares (common/signed-statement.ts) keeps the bytes the
// statements had before it: what agents hold in their state dirs and histories hold verifies, and
// what is signed now is those same bytes. The fixtures are what the committed 0558a72 code signed
// with the fixed keys below (test/fixtures/signed-statements-0.3.0.json); Ed25519 and HMAC are
// deterministic, so equal bytes are what an older verifier accepted, and the reverse holds too.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { reportProblem, signReport, type ReportHeader } from '../../common/agent-report.js';
import { parseKeyLine, publicLine, type CatalogKey } from '../../common/catalog-key.js';
import { endpointAttestationProblem, RENDEZVOUS_DOMAIN, signEndpointAttestation } from '../../common/endpoint-attestation.js';
import { signPlacementTicket, verifyPlacementTicket, type PlacementTicket } from '../../common/placement-ticket.js';
import { openStatement, signedStatement, windowProblems, type StatementForm } from '../../common/signed-statement.js';
import { signWeightsPermit, weightsPermitRefusal, type WeightsPermit } from '../../common/weights-permit.js';
import { chatAttestation } from '../helpers/signers.js';

const signed = JSON.parse(readFileSync(resolve(__dirname, '../fixtures/signed-statements-0.3.0.json'), 'utf8')) as Record<string, string>;

const seed = createHash('sha256').update('llmgw signed-statement fixture').digest().toString('base64url');
const ed = parseKeyLine(`ed25519-private:${seed}`, 'the fixture key');
const hmac = parseKeyLine('hmac:llmgw-signed-statement-fixture-legacy-key', 'the fixture key');
const ring = (key: CatalogKey) => ({ file: 'fixture', signing: key, all: [key] });
const agentKey = publicLine(ed);

const T = 1_800_000_000_000;
const shardReport: ReportHeader = {
  kind: 'shards',
  nodeId: 'gpu-5',
  workflowId: 'reconcile/gpu-5',
  runId: 'run-7',
  signedAt: T,
  expiresAt: T + 600_000,
  digest: 'x'.repeat(43),
};
const weightsReport: ReportHeader = { ...shardReport, kind: 'weights', workflowId: '', runId: '', expiresAt: 0, digest: 'y'.repeat(43) };
const permit: WeightsPermit = {
  nodeId: 'gpu-5',
  revision: 'v2.abc.sig',
  modelSource: 'hf://org/model@main',
  issuedAt: T,
  expiresAt: T + 3_600_000,
};
const attestation = chatAttestation(T);
const ticket: PlacementTicket = {
  replicaId: 'replica/chat/3',
  placedByRun: 'run-2',
  chain: 'run-first',
  issuedAt: T,
  shardId: 'chat.3.r1.a1',
  nodeId: 'gpu-6',
  rank: 1,
  nnodes: 2,
  gpus: [0, 1],
  hcas: ['mlx5_0'],
  httpPort: 0,
  leaderAddress: '10.0.0.5',
  leaderNode: 'gpu-5',
  revision: 'v2.abc.sig',
  address: '10.0.0.6',
  deployment: 'chat',
  servedName: 'chat-model',
  peers: ['10.0.0.5', '10.0.0.6'],
};

describe('signed statements keep their bytes', () => {
  it('an agent report signs as before, and one signed before verifies', () => {
    expect(signReport(shardReport, ring(ed))).toBe(signed.shardReport);
    expect(signReport(weightsReport, ring(ed))).toBe(signed.weightsReport);
    const expected = { kind: 'shards', nodeId: 'gpu-5', digest: 'x'.repeat(43), now: T + 1_000 } as const;
    expect(
      reportProblem(signed.shardReport, agentKey, { ...expected, callers: [{ workflowId: 'reconcile/gpu-5', runId: 'run-7' }] }),
    ).toBeUndefined();
    expect(
      reportProblem(signed.weightsReport, agentKey, { ...expected, kind: 'weights', digest: 'y'.repeat(43), notBefore: T }),
    ).toBeUndefined();
  });

  it('a weights permit signs as before (Ed25519 and the legacy HMAC key), and one signed before verifies', () => {
    expect(signWeightsPermit(permit, ring(ed))).toBe(signed.permitEd);
    expect(signWeightsPermit(permit, ring(hmac))).toBe(signed.permitHmac);
    const want = { nodeId: 'gpu-5', revision: 'v2.abc.sig', modelSource: 'hf://org/model@main', now: T + 1_000 };
    expect(weightsPermitRefusal(signed.permitEd!, [ed], want)).toBeUndefined();
    expect(weightsPermitRefusal(signed.permitHmac!, [hmac], want)).toBeUndefined();
  });

  it('an endpoint attestation, with and without its TLS pin, and a rendezvous attestation sign as before and verify', () => {
    expect(signEndpointAttestation(attestation, ring(ed))).toBe(signed.endpoint);
    expect(signEndpointAttestation({ ...attestation, tlsFingerprint: 'a'.repeat(64) }, ring(ed))).toBe(signed.endpointTls);
    expect(signEndpointAttestation({ ...attestation, port: 30150 }, ring(ed), RENDEZVOUS_DOMAIN)).toBe(signed.rendezvous);
    const { issuedAt: _issuedAt, ...endpoint } = attestation;
    const expected = { ...endpoint, ticketIssuedAt: T };
    expect(endpointAttestationProblem(signed.endpoint, agentKey, expected)).toBeUndefined();
    expect(endpointAttestationProblem(signed.endpointTls, agentKey, expected)).toBeUndefined();
    expect(endpointAttestationProblem(signed.rendezvous, agentKey, { ...expected, port: 30150 }, RENDEZVOUS_DOMAIN)).toBeUndefined();
    // Each under its own domain only.
    expect(endpointAttestationProblem(signed.rendezvous, agentKey, { ...expected, port: 30150 })).toMatch(/\(mismatch\)/);
  });

  it('a placement ticket, with each optional field or none, signs as before and verifies', () => {
    const leaderKey = publicLine(ed);
    const cases: [string, PlacementTicket, CatalogKey][] = [
      ['ticket', ticket, ed],
      ['ticketHmac', ticket, hmac],
      ['ticketKeyChain', { ...ticket, keyChain: 'run-zero' }, ed],
      ['ticketLeaderKey', { ...ticket, leaderKey }, ed],
      ['ticketBoth', { ...ticket, keyChain: 'run-zero', leaderKey }, ed],
      // An empty optional field was never signed: the same bytes as none.
      ['ticketEmptyKeyChain', { ...ticket, keyChain: '' }, ed],
    ];
    for (const [name, statement, key] of cases) {
      expect(signPlacementTicket(statement, ring(key)), name).toBe(signed[name]);
      const verdict = verifyPlacementTicket(signed[name]!, [key]);
      expect(verdict, name).toMatchObject({ ok: true, legacy: key.kind === 'hmac' });
    }
  });
});

describe('the shared framing', () => {
  const form: StatementForm<{ node: string; at: number; note?: string }> = {
    domain: 'test statement v1',
    fields: ['node', 'at'],
    optional: ['note'],
  };

  it('reads back what it signed, and refuses it under another domain, another key, or with a field moved', () => {
    const text = signedStatement(form, { node: 'gpu-1', at: T, note: 'n' }, ring(ed));
    expect(Buffer.from(text.slice(0, text.indexOf('.')), 'base64url').toString()).toBe(
      '[["node","gpu-1"],["at",1800000000000],["note","n"]]',
    );
    expect(openStatement(form, text, [ed])).toEqual({ ok: true, statement: { node: 'gpu-1', at: T, note: 'n' }, legacy: false });
    expect(openStatement(form, text, agentKey)).toMatchObject({ ok: true });
    expect(openStatement({ ...form, domain: 'another statement v1' }, text, [ed])).toMatchObject({ ok: false, why: 'mismatch' });
    expect(openStatement(form, text, [hmac])).toMatchObject({ ok: false, why: 'unknown-key' });
    expect(openStatement(form, text, 'ed25519-public:short')).toMatchObject({ ok: false, why: 'bad-key' });
    const swapped = Buffer.from('[["at",1800000000000],["node","gpu-1"]]').toString('base64url');
    expect(openStatement(form, `${swapped}${text.slice(text.indexOf('.'))}`, [ed])).toEqual({ ok: false, why: 'unreadable' });
  });

  it('names each way a signing time falls outside its window', () => {
    expect(windowProblems(T, { now: T, clockSkewMs: 60_000, expiresAt: T + 1, notBefore: { at: T, earlier: 'too early' } })).toEqual([]);
    expect(windowProblems(T + 120_000, { now: T, clockSkewMs: 60_000 })).toEqual(['it was signed in the future (the host clock is off)']);
    expect(windowProblems(T, { now: T, expiresAt: T })).toEqual(['it expired at 2027-01-15T08:00:00.000Z']);
    expect(windowProblems(Number('x'), { notBefore: { at: T, earlier: 'before the ticket' } })).toEqual([
      'it was signed at NaN, before the ticket',
    ]);
  });
});
