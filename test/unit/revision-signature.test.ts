// Only the catalog decides what runs: the control worker's signature over a resolved revision,
// the agent's check of it, the key file both read, and the snapshot ↔ wire conversion the
// signature travels through (a field added to one side only fails the round trip).
import { chmodSync, existsSync, mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { clone, create } from '@bufbuild/protobuf';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { createRevisionCheck } from '../../agent/revision-check.js';
import { recordPath } from '../../agent/supervisor/spec-store.js';
import { createSupervisor } from '../../agent/supervisor/supervisor.js';
import { ensureCatalogKeyFile, keyFileWarnings, readCatalogKeys } from '../../common/catalog-key.js';
import { FailureType, NON_RETRYABLE_AGENT_FAILURES } from '../../common/failures.js';
import { engineProfileFromSnapshot, snapshotFromEngineProfile } from '../../common/profile-conversion.js';
import type { DeploymentView, ProfileSnapshot } from '../../common/replica-types.js';
import type { Catalog } from '../../catalog/schema.js';
import { revisionRefusal } from '../../activities/revision-liveness.js';
import { revisionOf } from '../../common/revision.js';
import { canonicalRevision, signSnapshot, verifyRevision } from '../../common/revision-signature.js';
import { signPlacementTicket } from '../../common/placement-ticket.js';
import { ticketFor } from '../helpers/catalog-key.js';
import { rejection } from '../helpers/failures.js';
import { EngineProfileSchema, StartShardSchema, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';

/** A start of an engine not yet recorded on the agent. */
const NEW = { newStart: true };

const SNAPSHOT: ProfileSnapshot = {
  model: 'llama-8b',
  modelSource: 'meta-llama/Llama-3.1-8B-Instruct',
  servedName: 'llama',
  profile: 'h100-tp2',
  engine: 'vllm',
  launcher: 'native',
  gpuClass: 'H100',
  tensorParallel: 2,
  pipelineParallel: 1,
  gpusPerNode: 2,
  nodes: 1,
  args: ['--max-model-len', '8192'],
  env: { VLLM_LOGGING_LEVEL: 'INFO', HF_TOKEN: { fromHost: 'HF_TOKEN' }, NCCL_DEBUG: { fromHost: 'NCCL_DEBUG_LEVEL' } },
  startupTimeoutSeconds: 900,
  minGpuMemoryMib: 0,
};

function keyFile(...keys: string[]): string {
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-key-test-')), 'catalog.key');
  writeFileSync(file, keys.map((k) => `${k}\n`).join(''), { mode: 0o600 });
  return file;
}

const KEY_A = 'a'.repeat(64);
const KEY_B = 'b'.repeat(64);

// The legacy shared keys of these tests both sign and verify (the migration window of docs/keys.md).
function startShard(profile = engineProfileFromSnapshot(signSnapshot(SNAPSHOT, readCatalogKeys(keyFile(KEY_A))))): StartShard {
  const spec = create(StartShardSchema, {
    shardId: 'llama.1.r0.a1',
    replicaId: 'replica/llama/1',
    notifyWorkflowId: 'replica/llama/1',
    nodeId: 'gpu-1',
    nnodes: 1,
    gpuIndices: [0, 1],
    profile,
  });
  spec.placementTicket = signPlacementTicket(ticketFor(spec), readCatalogKeys(keyFile(KEY_A)));
  return spec;
}

describe('revision signatures', () => {
  it('round-trips a snapshot through the wire: literal env, host references by name, and the signature', () => {
    const signed = signSnapshot(SNAPSHOT, readCatalogKeys(keyFile(KEY_A)));
    const wire = engineProfileFromSnapshot(signed);
    expect(wire.env).toEqual({ VLLM_LOGGING_LEVEL: 'INFO' });
    expect(wire.envFromHost).toEqual({ HF_TOKEN: 'HF_TOKEN', NCCL_DEBUG: 'NCCL_DEBUG_LEVEL' });
    expect(snapshotFromEngineProfile(wire)).toEqual(signed);
    expect(snapshotFromEngineProfile(engineProfileFromSnapshot(SNAPSHOT))).toEqual(SNAPSHOT);
  });

  it('verifies what the control worker signed, and refuses a revision changed after signing', () => {
    const keys = readCatalogKeys(keyFile(KEY_A));
    const wire = engineProfileFromSnapshot(signSnapshot(SNAPSHOT, keys));
    expect(wire.signature).toMatch(/^v1\.[0-9a-f]{12}\.[A-Za-z0-9_-]{43}$/);
    expect(verifyRevision(wire, keys.all)).toEqual({ ok: true, keyId: keys.signing!.id, legacy: true });
    const tampered: [string, (p: typeof wire) => void][] = [
      ['args', (p) => p.args.push('--trust-remote-code')],
      ['env', (p) => (p.env.LD_PRELOAD = '/tmp/x.so')],
      ['reference', (p) => (p.envFromHost.HF_TOKEN = 'AWS_SECRET_ACCESS_KEY')],
      ['source', (p) => (p.modelSource = 'evil/model')],
      ['parallelism', (p) => (p.tensorParallel = 8)],
    ];
    for (const [what, change] of tampered) {
      const copy = clone(EngineProfileSchema, wire);
      change(copy);
      expect(verifyRevision(copy, keys.all), what).toMatchObject({ ok: false, why: 'mismatch' });
    }
    expect(verifyRevision(engineProfileFromSnapshot(SNAPSHOT), keys.all)).toEqual({ ok: false, why: 'unsigned' });
    // The bytes signed do not depend on the order a map was filled in.
    const reordered = clone(EngineProfileSchema, wire);
    reordered.envFromHost = { NCCL_DEBUG: 'NCCL_DEBUG_LEVEL', HF_TOKEN: 'HF_TOKEN' };
    expect(canonicalRevision(reordered)).toBe(canonicalRevision(wire));
  });

  it('rotates keys: the first key signs, every key in the file verifies, a key the agent lacks is named', () => {
    const oldSigned = engineProfileFromSnapshot(signSnapshot(SNAPSHOT, readCatalogKeys(keyFile(KEY_A))));
    const rotating = readCatalogKeys(keyFile(KEY_B, KEY_A));
    expect(verifyRevision(oldSigned, rotating.all).ok).toBe(true);
    const newSigned = engineProfileFromSnapshot(signSnapshot(SNAPSHOT, rotating));
    const agentWithOldKeyOnly = readCatalogKeys(keyFile(KEY_A));
    expect(verifyRevision(newSigned, agentWithOldKeyOnly.all)).toEqual({ ok: false, why: 'unknown-key', keyId: rotating.signing!.id });
  });

  it('reads a key file only when it holds a long enough key, and creates one 0600 without replacing it', () => {
    expect(() => readCatalogKeys(keyFile('short'))).toThrow(/line 1 of .* shorter than 32 characters/);
    expect(() => readCatalogKeys(keyFile('# only a comment'))).toThrow(/holds no key/);
    expect(() => readCatalogKeys('/nonexistent/catalog.key')).toThrow(
      /cannot read the catalog key file \/nonexistent\/catalog.key: ENOENT/,
    );
    const file = join(mkdtempSync(join(tmpdir(), 'llmgw-key-new-')), 'sub', 'catalog.key');
    expect(ensureCatalogKeyFile(file)).toBe(true);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const first = readCatalogKeys(file).signing!.id;
    expect(ensureCatalogKeyFile(file)).toBe(false);
    expect(readCatalogKeys(file).signing!.id).toBe(first);
    expect(readCatalogKeys(`${file}.pub`).signing).toBeUndefined();
    const loose = keyFile(KEY_A);
    chmodSync(loose, 0o644);
    expect(keyFileWarnings(loose).join()).toMatch(/readable by others \(mode 644\)/);
  });
});

describe("the agent's check", () => {
  it('refuses, non-retryably and saying why and what to do: no key, unsigned, changed, signed with a key it lacks', async () => {
    expect(NON_RETRYABLE_AGENT_FAILURES).toContain(FailureType.UnsignedRevision);
    const withA = createRevisionCheck({ kind: 'keys', file: keyFile(KEY_A) });
    await expect(withA(startShard(), NEW)).resolves.toBeUndefined();

    const noKey = await rejection(createRevisionCheck({ kind: 'no-key' })(startShard(), NEW));
    expect(noKey.type).toBe(FailureType.UnsignedRevision);
    expect(noKey.nonRetryable).toBe(true);
    expect(noKey.message).toMatch(/refused shard llama\.1\.r0\.a1 .*no catalog key.*--catalog-key FILE or LLMGW_CATALOG_KEY_FILE/);

    expect((await rejection(withA(startShard(engineProfileFromSnapshot(SNAPSHOT)), NEW))).message).toMatch(
      /carries no catalog signature.*deploy through the catalog/,
    );
    const changed = startShard();
    changed.profile!.args.push('--evil');
    expect((await rejection(withA(changed, NEW))).message).toMatch(/differ from the revision the control worker signed/);
    const signedWithB = startShard(engineProfileFromSnapshot(signSnapshot(SNAPSHOT, readCatalogKeys(keyFile(KEY_B)))));
    expect((await rejection(withA(signedWithB, NEW))).message).toMatch(
      /signed with catalog key [0-9a-f]{12}, which is not in this agent's key file/,
    );
    await expect(createRevisionCheck({ kind: 'insecure-unsigned' })(changed, NEW)).resolves.toBeUndefined();
  });

  it('refuses before writing a spec or spawning anything', async () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-refuse-'));
    const sup = createSupervisor({
      nodeId: 'gpu-1',
      stateDir,
      portRange: { from: 29900, to: 29910 },
      advertiseAddress: '127.0.0.1',
      engineContext: { fakeEngineCommand: ['false'] },
      checkRevision: createRevisionCheck({ kind: 'keys', file: keyFile(KEY_A) }),
    });
    try {
      const failure = await sup.start(startShard(engineProfileFromSnapshot(SNAPSHOT))).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(ApplicationFailure);
      expect((failure as ApplicationFailure).type).toBe(FailureType.UnsignedRevision);
      expect(existsSync(recordPath(stateDir, 'llama.1.r0.a1'))).toBe(false);
      expect(sup.list()).toEqual([]);
    } finally {
      sup.close();
    }
  });
});

describe('revocation: only live revisions are signed for', () => {
  const keys = readCatalogKeys(keyFile(KEY_A));
  const current = signSnapshot(SNAPSHOT, keys);
  // An earlier revision of the same served name, signed when it was the catalog's.
  const earlier = signSnapshot({ ...SNAPSHOT, args: ['--max-model-len', '4096'] }, keys);
  const view = (snapshots: ProfileSnapshot[]): DeploymentView => ({
    name: 'llama',
    model: SNAPSHOT.model,
    profile: SNAPSHOT.profile,
    servedName: SNAPSHOT.servedName,
    phase: 'Ready',
    desired: 1,
    ready: 1,
    replicas: [],
    reason: '',
    revisions: snapshots.map((s) => ({ profile: s.profile, revision: revisionOf(s), signature: s.signature! })),
  });
  const catalog = (revoked: string[] = [], profile = SNAPSHOT.profile): Catalog =>
    ({ models: [{ name: SNAPSHOT.model, profiles: [{ name: profile }] }], revoked }) as unknown as Catalog;

  it('refuses a signed revision its deployment does not run now, a revoked one, and one whose profile left the catalog', () => {
    expect(revisionRefusal(view([current]), current.signature!, catalog(), keys.all)).toBeUndefined();
    expect(revisionRefusal(view([current]), earlier.signature!, catalog(), keys.all)).toMatch(
      new RegExp(`not one deployment llama runs now \\(${revisionOf(current)}\\)`),
    );
    // Both sides of a rollout in progress are live, until the catalog revokes one.
    expect(revisionRefusal(view([current, earlier]), earlier.signature!, catalog(), keys.all)).toBeUndefined();
    expect(revisionRefusal(view([current, earlier]), earlier.signature!, catalog([revisionOf(earlier)]), keys.all)).toBe(
      `revision ${revisionOf(earlier)} is revoked in the catalog`,
    );
    expect(revisionRefusal(view([current]), current.signature!, catalog([], 'other'), keys.all)).toBe(
      `profile ${SNAPSHOT.profile} of model ${SNAPSHOT.model} is no longer in the catalog`,
    );
  });

  it('refuses a revision signed with a key the control worker no longer holds', () => {
    const rotated = readCatalogKeys(keyFile(KEY_B));
    expect(revisionRefusal(view([current]), current.signature!, catalog(), rotated.all)).toMatch(
      /signed with key [0-9a-f]{12}, which is no longer in the control worker's key file/,
    );
  });
});
