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
import { testCatalogKeyFile, testPublicKeyFile } from '../helpers/catalog-key.js';
import { snapshotOf } from '../helpers/rollout.js';

const SOURCE = `hf://org/model@${'a'.repeat(40)}`;
// A snapshot as a revision is resolved (snapshotOf's fields), for a hub source and vLLM.
const { revision: _revision, ...SNAPSHOT } = snapshotOf({ modelSource: SOURCE, engine: 'vllm', startupTimeoutSeconds: 900 });

const signed = (snapshot: ProfileSnapshot) => signSnapshot(snapshot, readCatalogKeys(testCatalogKeyFile()));
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
    const check = createFetchCheck({ kind: 'keys', file: testPublicKeyFile() }, 'gpu-a');
    const input = (profile?: ProfileSnapshot) => ({ modelSource: SOURCE, replicaId: 'r', ...(profile ? { profile } : {}) });
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
});
