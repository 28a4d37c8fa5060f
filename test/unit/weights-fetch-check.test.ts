// The agent fetches weights only for a revision the control worker signed (agent/weights/
// fetch-check.ts), as it starts only those: a fetchWeights from a hand-started replica, or any
// workflow that schedules it on the host's queue, is refused before the cache is touched.
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createFetchCheck } from '../../agent/weights/fetch-check.js';
import { createHostWeights } from '../../agent/weights/host-weights.js';
import { readCatalogKeys } from '../../common/catalog-key.js';
import { FailureType } from '../../common/failures.js';
import type { ProfileSnapshot } from '../../common/replica-types.js';
import { signSnapshot } from '../../common/revision-signature.js';
import { signPlacementTicket } from '../../common/placement-ticket.js';
import { signWeightsPermit, WEIGHTS_PERMIT_TTL_MS } from '../../common/weights-permit.js';
import { testCatalogKeyFile, testPublicKeyFile } from '../helpers/catalog-key.js';
import { snapshotOf } from '../helpers/rollout.js';
import { demoTicket } from '../helpers/tickets.js';

const SOURCE = `hf://org/model@${'a'.repeat(40)}`;
// A snapshot as a revision is resolved (snapshotOf's fields), for a hub source and vLLM.
const { revision: _revision, ...SNAPSHOT } = snapshotOf({ modelSource: SOURCE, engine: 'vllm', startupTimeoutSeconds: 900 });

const keyring = () => readCatalogKeys(testCatalogKeyFile());
const signed = (snapshot: ProfileSnapshot) => signSnapshot(snapshot, keyring());
const NOW = Date.parse('2026-12-06T10:00:00Z');
const permitFor = (profile: ProfileSnapshot, over: { nodeId?: string; issuedAt?: number; modelSource?: string } = {}) => {
  const issuedAt = over.issuedAt ?? NOW;
  return signWeightsPermit(
    {
      nodeId: over.nodeId ?? 'gpu-a',
      revision: profile.signature ?? '',
      modelSource: over.modelSource ?? profile.modelSource,
      issuedAt,
      expiresAt: issuedAt + WEIGHTS_PERMIT_TTL_MS,
    },
    keyring(),
  );
};
const refusalOf = (run: () => unknown): { type?: string; nonRetryable?: boolean; message: string } | undefined => {
  try {
    run();
    return undefined;
  } catch (error) {
    return error as { type?: string; nonRetryable?: boolean; message: string };
  }
};

describe('the agent fetches weights only for a signed revision', () => {
  it('refuses a fetch without a signed revision before the cache is touched', async () => {
    const weightsDir = mkdtempSync(join(tmpdir(), 'llmgw-fetch-check-'));
    const weights = createHostWeights(
      { weightsDir, nodeId: 'gpu-a' },
      () => [],
      () => undefined,
      undefined,
      {
        kind: 'keys',
        file: testPublicKeyFile(),
      },
    );
    const refused = await weights.activities.fetchWeights({ modelSource: SOURCE, replicaId: 'replica/hand-started' }).then(
      () => undefined,
      (e: unknown) => e as { type?: string; nonRetryable?: boolean; message: string },
    );
    expect(refused).toMatchObject({ type: FailureType.UnsignedRevision, nonRetryable: true });
    expect(refused!.message).toMatch(
      /^agent gpu-a refused to fetch hf:\/\/org\/model@a+ for replica\/hand-started: the fetch carries no signed revision/,
    );
    expect(readdirSync(weightsDir)).toEqual([]);
  });

  it('takes the signed revision naming the source, and refuses an unsigned, changed or other one', () => {
    const check = createFetchCheck({ kind: 'keys', file: testPublicKeyFile() }, 'gpu-a', () => NOW);
    const input = (profile?: ProfileSnapshot) => ({
      modelSource: SOURCE,
      replicaId: 'r',
      ...(profile ? { profile, permit: permitFor(profile) } : {}),
    });
    expect(refusalOf(() => check(input(signed(SNAPSHOT))))).toBeUndefined();
    expect(refusalOf(() => check(input(SNAPSHOT)))?.message).toMatch(/carries no catalog signature/);
    expect(refusalOf(() => check(input({ ...signed(SNAPSHOT), args: ['--trust-remote-code'] })))?.message).toMatch(
      /changed after the catalog resolved it/,
    );
    const other = signed({ ...SNAPSHOT, modelSource: `hf://org/other@${'b'.repeat(40)}` });
    expect(refusalOf(() => check(input(other)))?.message).toMatch(/names another source \(hf:\/\/org\/other@b+\)/);
    // Without a key the agent starts nothing, so it fetches nothing; told --insecure-unsigned, anything.
    expect(refusalOf(() => createFetchCheck({ kind: 'no-key' })(input(signed(SNAPSHOT))))?.message).toMatch(/has no catalog key/);
    expect(refusalOf(() => createFetchCheck({ kind: 'insecure-unsigned' })(input()))).toBeUndefined();
  });

  it('fetches a signed revision only with a fresh word that it is live here: a ticket or a permit for this node', () => {
    const check = createFetchCheck({ kind: 'keys', file: testPublicKeyFile() }, 'gpu-a', () => NOW);
    const profile = signed(SNAPSHOT);
    const fetch = (extra: { ticket?: string; permit?: string }) =>
      refusalOf(() => check({ modelSource: SOURCE, replicaId: 'r', profile, ...extra }));
    // The signature alone, copied out of any history, no longer fetches (a revoked revision gets neither).
    expect(fetch({})).toMatchObject({ type: FailureType.UnsignedRevision, nonRetryable: true });
    expect(fetch({})?.message).toMatch(/neither a placement ticket nor a weights permit/);
    const ticket = (over: Parameters<typeof demoTicket>[0]) =>
      signPlacementTicket(demoTicket({ nodeId: 'gpu-a', revision: profile.signature!, issuedAt: NOW, ...over }), keyring());
    expect(fetch({ ticket: ticket({}) })).toBeUndefined();
    expect(fetch({ ticket: ticket({ nodeId: 'gpu-b' }) })?.message).toMatch(/placement ticket is for node gpu-b/);
    expect(fetch({ ticket: ticket({ revision: signed({ ...SNAPSHOT, startupTimeoutSeconds: 31 }).signature! }) })?.message).toMatch(
      /placement ticket is for another revision/,
    );
    expect(fetch({ ticket: ticket({ issuedAt: NOW - 25 * 3600_000 }) })?.message).toMatch(/too long ago/);
    expect(fetch({ ticket: `${ticket({}).slice(0, -4)}AAAA` })?.message).toMatch(/does not match its signature/);
    expect(fetch({ permit: permitFor(profile) })).toBeUndefined();
    expect(fetch({ permit: permitFor(profile, { nodeId: 'gpu-b' }) })?.message).toMatch(/permit is for node gpu-b/);
    expect(fetch({ permit: permitFor(profile, { issuedAt: NOW - WEIGHTS_PERMIT_TTL_MS }) })?.message).toMatch(/permit expired/);
    expect(fetch({ permit: permitFor(signed({ ...SNAPSHOT, startupTimeoutSeconds: 31 })) })?.message).toMatch(
      /permit is for another revision/,
    );
    expect(fetch({ permit: `${permitFor(profile).slice(0, -4)}AAAA` })?.message).toMatch(/does not verify/);
  });
});
