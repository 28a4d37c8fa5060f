// Public-key signatures (issue 26): the control worker signs revisions and placement tickets
// with its private Ed25519 key; agents verify with public keys only, so what one agent holds
// cannot sign for any other; the move from the shared HMAC key keeps a window in which agents
// accept both.
import { demoTicket } from '../helpers/tickets.js';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { createRevisionCheck } from '../../agent/revision-check.js';
import {
  ensureCatalogKeyFile,
  newKeyPairLines,
  publicKeyFileOf,
  readCatalogKeys,
  readVerifyingKeys,
  type CatalogKeyring,
} from '../../common/catalog-key.js';
import { FailureType } from '../../common/failures.js';
import { signPlacementTicket, verifyPlacementTicket, type PlacementTicket } from '../../common/placement-ticket.js';
import { signRevision, verifyRevision } from '../../common/revision-signature.js';
import { signStatement } from '../../common/signature.js';
import { rejection } from '../helpers/failures.js';
import { Engine, EngineProfileSchema, StartShardSchema, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';

/** A start of an engine not yet recorded on the agent. */
const NEW = { newStart: true };

function fileWith(...lines: string[]): string {
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-sig-test-')), 'keys');
  writeFileSync(file, lines.map((l) => `${l}\n`).join(''), { mode: 0o600 });
  return file;
}

function pair(): { privateFile: string; publicFile: string } {
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-sig-pair-')), 'catalog.key');
  ensureCatalogKeyFile(file);
  return { privateFile: file, publicFile: publicKeyFileOf(file) };
}

function spec(keyring: CatalogKeyring, change: (s: StartShard) => void = () => undefined): StartShard {
  const profile = create(EngineProfileSchema, { name: 'p', engine: Engine.FAKE, model: 'demo', servedName: 'demo', gpusPerNode: 1 });
  profile.signature = signRevision(profile, keyring);
  const start = create(StartShardSchema, {
    replicaId: 'replica/demo/1',
    notifyWorkflowId: 'replica/demo/1',
    shardId: 'demo.1.r0.a1',
    nodeId: 'gpu-1',
    nnodes: 1,
    gpuIndices: [0],
    profile,
  });
  const ticket: PlacementTicket = demoTicket({
    replicaId: start.replicaId,
    shardId: start.shardId,
    revision: profile.signature,
    deployment: '',
  });

  start.placementTicket = signPlacementTicket(ticket, keyring);
  change(start);
  return start;
}

describe('Ed25519 signatures', () => {
  it('signs with the private key and verifies with the public one; an agent refuses to hold a private key', () => {
    const { privateFile, publicFile } = pair();
    const worker = readCatalogKeys(privateFile);
    const agent = readVerifyingKeys(publicFile);
    expect(worker.signing?.kind).toBe('ed25519');
    expect(agent.signing).toBeUndefined();
    const profile = create(EngineProfileSchema, { name: 'p', engine: Engine.FAKE, model: 'demo' });
    profile.signature = signRevision(profile, worker);
    expect(profile.signature).toMatch(/^v2\.[0-9a-f]{12}\.[A-Za-z0-9_-]{86}$/);
    expect(verifyRevision(profile, agent.all)).toEqual({ ok: true, keyId: worker.signing!.id, legacy: false });
    profile.args.push('--evil');
    expect(verifyRevision(profile, agent.all)).toMatchObject({ ok: false, why: 'mismatch' });
    expect(() => readVerifyingKeys(privateFile)).toThrow(/holds a private Ed25519 key: agents and routers hold public keys only/);
    expect(() => readCatalogKeys(fileWith('ed25519-public:short'))).toThrow(/line 1 .* not a base64url Ed25519 key/);
  });

  it('point 1: with only what one agent holds, nothing can be signed that another agent accepts', async () => {
    const { privateFile, publicFile } = pair();
    const stolen = readVerifyingKeys(publicFile);
    const otherAgent = createRevisionCheck({ kind: 'keys', file: publicFile });
    // The stolen file cannot sign at all…
    expect(() => signStatement('llmgw revision v1', 'anything', readCatalogKeys(publicFile))).toThrow(/holds no key that can sign/);
    // …and a signature made with a key of the thief's own, under the stolen key's id, fails.
    const own = readCatalogKeys(fileWith(newKeyPairLines().privateLine));
    const forgedRing: CatalogKeyring = { ...own, signing: { ...own.signing!, id: stolen.all[0]!.id } };
    const forged = spec(forgedRing);
    expect((await rejection(otherAgent(forged, NEW))).message).toMatch(/differ from the revision the control worker signed/);
    // A genuine revision with a forged ticket (other GPUs) is refused as a placement.
    const genuine = spec(readCatalogKeys(privateFile));
    const retargeted = spec(readCatalogKeys(privateFile), (s) => {
      const verdict = verifyPlacementTicket(genuine.placementTicket, stolen.all);
      if (!verdict.ok) throw new Error(verdict.why);
      s.gpuIndices = [3];
      s.placementTicket = signPlacementTicket({ ...verdict.ticket, gpus: [3] }, forgedRing);
    });
    const failure = await rejection(otherAgent(retargeted, NEW));
    expect(failure.type).toBe(FailureType.PlacementRefused);
    expect(failure.message).toMatch(/placement ticket does not match its signature/);
    await expect(otherAgent(genuine, NEW)).resolves.toBeUndefined();
  });

  it('refuses a start that differs from its ticket, naming what differs', async () => {
    const { privateFile, publicFile } = pair();
    const worker = readCatalogKeys(privateFile);
    const check = createRevisionCheck({ kind: 'keys', file: publicFile });
    const cases: [string, (s: StartShard) => void, RegExp][] = [
      ['no ticket', (s) => (s.placementTicket = ''), /carries no placement ticket/],
      ['GPUs', (s) => (s.gpuIndices = [0, 1]), /its GPUs \[0,1\] is not the placed \[0\]/],
      ['port 22', (s) => (s.httpPort = 22), /its httpPort 22 is not the placed 0/],
      ['leader', (s) => (s.leaderAddress = '203.0.113.9'), /leader address "203\.0\.113\.9" is not the registered address/],
      ['node', (s) => (s.nodeId = 'gpu-2'), /its node "gpu-2" is not the placed "gpu-1"/],
      ['notify', (s) => (s.notifyWorkflowId = 'evil'), /notified workflow "evil"/],
    ];
    for (const [what, change, message] of cases) {
      const failure = await rejection(check(spec(worker, change), NEW));
      expect(failure.type, what).toBe(FailureType.PlacementRefused);
      expect(failure.nonRetryable, what).toBe(true);
      expect(failure.message, what).toMatch(message);
    }
  });

  it('moves from the shared HMAC key: during the window an agent accepts both, after it only Ed25519', async () => {
    const legacySecret = 'c'.repeat(64);
    const { privateFile } = pair();
    const ed = readCatalogKeys(privateFile);
    const hmac = readCatalogKeys(fileWith(legacySecret));
    const publicLine = readFileLine(publicKeyFileOf(privateFile));
    // Step 1: agents get the public key next to the old shared key.
    const windowCheck = createRevisionCheck({ kind: 'keys', file: fileWith(publicLine, legacySecret) });
    await expect(windowCheck(spec(hmac), NEW)).resolves.toBeUndefined();
    await expect(windowCheck(spec(ed), NEW)).resolves.toBeUndefined();
    // A worker whose file lists the new private key first signs with Ed25519.
    const rotatingWorker = readCatalogKeys(fileWith(readFileLine(privateFile), legacySecret));
    expect(rotatingWorker.signing?.kind).toBe('ed25519');
    // Step 3: the old line is removed from the agents: HMAC signatures no longer start anything.
    const closed = createRevisionCheck({ kind: 'keys', file: fileWith(publicLine) });
    await expect(closed(spec(ed), NEW)).resolves.toBeUndefined();
    expect((await rejection(closed(spec(hmac), NEW))).message).toMatch(
      /signed with catalog key [0-9a-f]{12}, which is not in this agent's key file/,
    );
  });
});

function readFileLine(file: string): string {
  return readFileSync(file, 'utf8').trim();
}
