// The host weights cache against the stand-in hub, without Temporal: concurrent asks share
// one fetch, the budget evicts the least recently used revision no shard uses (never one in
// use), and a cache that cannot make room (budget, or a full disk: a small tmpfs) fails with
// WeightsNoSpace, the failure that makes a replica go elsewhere.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApplicationFailure } from '@temporalio/common';
import { HostWeightsCache, type HostCacheOptions } from '../../agent/weights/host-cache.js';
import { FailureType } from '../../common/failures.js';
import { startStandInHub, type StandInHub } from '../helpers/stand-in-hub.js';
import { needsRoot } from '../helpers/skips.js';

const MB = 1_000_000;
let hub: StandInHub;
const commits: Record<string, string> = {};
const previousEndpoint = process.env.HF_ENDPOINT;

function model(name: string, bytes: number): void {
  const repo = `llmgw-test/${name}`;
  commits[name] = hub.addRepo({
    repo,
    files: [
      { path: 'config.json', size: 300 },
      { path: 'model.safetensors', size: bytes },
    ],
  });
}
const source = (name: string): string => `hf://llmgw-test/${name}@${commits[name]}`;

function cache(options: Partial<HostCacheOptions> & { inUse?: string[] } = {}): HostWeightsCache {
  return new HostWeightsCache({
    weightsDir: options.weightsDir ?? mkdtempSync(join(tmpdir(), 'llmgw-weights-unit-')),
    ...(options.budget ? { budget: options.budget } : {}),
    sourcesInUse: () => (options.inUse ?? []).map(source),
    log: () => undefined,
  });
}

const never = new AbortController().signal;
const ignore = (): void => undefined;

async function failureOf(promise: Promise<unknown>): Promise<ApplicationFailure> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ApplicationFailure);
  return error as ApplicationFailure;
}

beforeAll(async () => {
  hub = await startStandInHub();
  process.env.HF_ENDPOINT = hub.url;
  model('a', 10 * MB);
  model('b', 10 * MB);
  model('c', 10 * MB);
});

afterAll(async () => {
  if (previousEndpoint === undefined) delete process.env.HF_ENDPOINT;
  else process.env.HF_ENDPOINT = previousEndpoint;
  await hub?.close();
});

describe('the host weights cache', () => {
  it('shares one fetch among replicas asking at once', async () => {
    const host = cache();
    hub.resetCounter();
    hub.setBandwidth(20 * MB);
    const results = await Promise.all([1, 2, 3].map(() => host.ensure(source('a'), never, ignore)));
    hub.setBandwidth(0);
    expect(results.filter((r) => !r.joined)).toHaveLength(1);
    expect(hub.bytesServed()).toBe(10 * MB + 300);
  });

  it('evicts the least recently used revision no shard uses, never one in use, and refuses when nothing can go', async () => {
    const inUse = ['a'];
    const host = cache({ budget: { bytes: 25 * MB }, inUse });
    await host.ensure(source('a'), never, ignore);
    await host.ensure(source('b'), never, ignore);
    // a is older, but a shard runs it: b goes.
    await host.ensure(source('c'), never, ignore);
    expect(
      host
        .list()
        .map((r) => r.repo)
        .sort(),
    ).toEqual(['llmgw-test/a', 'llmgw-test/c']);
    expect(existsSync(join(host.weightsDir, 'models--llmgw-test--b'))).toBe(false);

    inUse.push('c');
    const failure = await failureOf(host.ensure(source('b'), never, ignore));
    expect(failure.type).toBe(FailureType.WeightsNoSpace);
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toMatch(/over its budget of 25\.0 MB, and every revision it holds is in use/);
  });

  it('fails with WeightsNoSpace on a full disk (a 12 MB tmpfs; needs root to mount)', async (context) => {
    const why = needsRoot('mounting a tmpfs');
    if (why) context.skip(why);
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-weights-tmpfs-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=12m', 'tmpfs', dir]);
    try {
      const host = cache({ weightsDir: dir, inUse: ['a'] });
      await host.ensure(source('a'), never, ignore);
      const failure = await failureOf(host.ensure(source('b'), never, ignore));
      expect(failure.type).toBe(FailureType.WeightsNoSpace);
      expect(failure.message).toMatch(/needed in .*free on its disk/);
    } finally {
      execFileSync('umount', [dir]);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
