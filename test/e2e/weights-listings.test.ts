// Listings that try to write outside the host's weights cache, against real stores (moto's S3
// server with a versioned bucket, the stand-in hub): the agent's fetch refuses them before it
// writes anything, naming the entry and what to do (the agent's own fetch functions, as
// fetchWeights runs them, against a cache folder inside a folder the test watches). And a real
// agent asked by a workflow of someone else's to fetch without a signed revision writes nothing.
import { mkdirSync, mkdtempSync, readdirSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ListObjectVersionsCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure, ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../common/failures.js';
import { s3ClientFromEnv, s3Digest } from '../../common/s3-store.js';
import type { S3Source } from '../../common/model-source.js';
import { blobsDir } from '../../agent/weights/cache-layout.js';
import { fetchRevision } from '../../agent/weights/fetch-revision.js';
import { FetchProgress } from '../../agent/weights/progress.js';
import { fetchS3Revision } from '../../agent/weights/s3-fetch.js';
import { startMotoServer, type MotoServer } from '../helpers/moto-server.js';
import { startStandInHub, type StandInHub } from '../helpers/stand-in-hub.js';
import { useCallWorker } from '../helpers/call-worker.js';
import { startTcpAgent } from '../helpers/fleet.js';
import { uniqueId } from '../helpers/temporal.js';

let moto: MotoServer;
let hub: StandInHub;
const nodeId = uniqueId('listings');
const stranger = useCallWorker('stranger', [nodeId]);
const agentCache = watchedCache();

beforeAll(async () => {
  [moto, hub] = await Promise.all([startMotoServer(), startStandInHub()]);
  await startTcpAgent(nodeId, { gpus: 'builtin:h100x8', env: { HF_ENDPOINT: hub.url }, extra: ['--weights-dir', agentCache.cache] });
}, 180_000);

afterAll(async () => {
  await Promise.all([moto?.stop(), hub?.close()]);
});

/** A cache folder inside a folder of its own: whatever a fetch writes, in or out of the cache, is seen. */
function watchedCache(): { root: string; cache: string } {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-listing-'));
  const cache = join(root, 'cache');
  mkdirSync(cache);
  return { root, cache };
}

/** Every path under `dir`, relative to it. */
function tree(dir: string): string[] {
  return (readdirSync(dir, { recursive: true }) as string[]).sort();
}

const common = (weightsDir: string, what: string, commit: string) => ({
  weightsDir,
  progress: new FetchProgress(what, commit),
  signal: new AbortController().signal,
  reserve: () => Promise.resolve(),
  log: () => undefined,
});

type Refusal = { type?: string; nonRetryable?: boolean; message: string };

describe('every weights listing is checked before anything is written', () => {
  it('refuses a versioned S3 revision whose pinned objects include a key with "../"', async () => {
    // The pinned objects, one of them named to climb out of the snapshot; that one is deleted
    // since (a delete marker), so the current listing is clean and the agent looks for the pin
    // among the bucket's versions, as it does for any prefix changed since its pin.
    await moto.python(`
s3.create_bucket(Bucket='vbucket')
s3.put_bucket_versioning(Bucket='vbucket', VersioningConfiguration={'Status': 'Enabled'})
s3.put_object(Bucket='vbucket', Key='llama/config.json', Body=b'{"architectures": ["LlamaForCausalLM"]}')
s3.put_object(Bucket='vbucket', Key='llama/../../../../escaped.json', Body=b'{"out": true}')
print(json.dumps(True))
`);
    const client = s3ClientFromEnv(moto.env(moto.admin));
    const listed = await client.send(new ListObjectVersionsCommand({ Bucket: 'vbucket', Prefix: 'llama/' }));
    const objects = (listed.Versions ?? [])
      .map((v) => ({ path: v.Key!.slice('llama/'.length), key: v.Key!, size: v.Size ?? 0, etag: (v.ETag ?? '').replace(/"/g, '') }))
      .sort((a, b) => (a.path < b.path ? -1 : 1));
    expect(objects.map((o) => o.path)).toEqual(['../../../../escaped.json', 'config.json']);
    const digest = s3Digest(objects);
    await moto.python(`
s3.delete_object(Bucket='vbucket', Key='llama/../../../../escaped.json')
print(json.dumps(True))
`);

    const { root, cache } = watchedCache();
    const source: S3Source = { kind: 's3', bucket: 'vbucket', prefix: 'llama', digest };
    const refused = await fetchS3Revision({
      ...common(cache, 's3://vbucket/llama', digest),
      source,
      client,
      who: 'the agent on gpu-7',
    }).then(
      () => undefined,
      (e: unknown) => e as Refusal,
    );
    expect(refused).toMatchObject({ type: FailureType.WeightsUnavailable, nonRetryable: true });
    expect(refused!.message).toMatch(/"\.\.\/\.\.\/\.\.\/\.\.\/escaped\.json", which has a "\.\." segment/);
    expect(refused!.message).toMatch(/Rename or delete that object in s3:\/\/vbucket \(and its old versions/);
    expect(tree(root)).toEqual(['cache']);
  });

  it('refuses a hub commit whose tree lists a path with "../", and a cache whose blobs folder links out', async () => {
    const repo = 'evil/model';
    const commit = hub.addRepo({
      repo,
      files: [
        { path: 'config.json', size: 100 },
        { path: '../../../../escaped.json', size: 100 },
      ],
    });
    const { root, cache } = watchedCache();
    const fetch = (dir: string, name: string, at: string) =>
      fetchRevision({ ...common(dir, name, at), repo: name, commit: at, endpoint: { hubUrl: hub.url } }).then(
        () => undefined,
        (e: unknown) => e as Refusal,
      );
    const refused = await fetch(cache, repo, commit);
    expect(refused).toMatchObject({ type: FailureType.WeightsUnavailable, nonRetryable: true });
    expect(refused!.message).toMatch(
      /^evil\/model@[0-9a-f]+: its listing holds "\.\.\/\.\.\/\.\.\/\.\.\/escaped\.json", which has a "\.\." segment/,
    );
    expect(refused!.message).toMatch(/repository's owner must rename or remove that file/);
    expect(tree(root)).toEqual(['cache']);

    // A sound repository, but the cache's blobs folder is a link planted to lead out of it.
    const good = 'org/good';
    const goodCommit = hub.addRepo({ repo: good, files: [{ path: 'config.json', size: 100 }] });
    const outside = join(root, 'outside');
    mkdirSync(outside);
    mkdirSync(join(blobsDir(cache, good), '..'), { recursive: true });
    symlinkSync(outside, blobsDir(cache, good));
    const planted = await fetch(cache, good, goodCommit);
    expect(planted).toMatchObject({ type: FailureType.WeightsUnavailable, nonRetryable: true });
    expect(planted!.message).toMatch(/is a folder of the cache that links out to/);
    expect(tree(outside)).toEqual([]);
  });

  it("a fetch without a signed revision, from a workflow that is not the control worker's, writes nothing", async () => {
    const repo = 'org/public';
    const commit = hub.addRepo({
      repo,
      files: [
        { path: 'config.json', size: 100 },
        { path: 'model.safetensors', size: 20_000 },
      ],
    });
    hub.resetCounter();
    // What a hand-started replica's fetch step sends: the source alone.
    const failure = await stranger
      .call(nodeId, 'fetchWeights', { modelSource: `hf://${repo}@${commit}`, replicaId: 'replica/hand-started' }, uniqueId('fetch'))
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(WorkflowFailedError);
    const cause = ((failure as WorkflowFailedError).cause as ActivityFailure).cause as ApplicationFailure;
    expect(cause).toMatchObject({ type: FailureType.UnsignedRevision, nonRetryable: true });
    expect(cause.message).toMatch(
      /refused to fetch hf:\/\/org\/public@[0-9a-f]+ for replica\/hand-started: the fetch carries no signed revision/,
    );
    expect(tree(agentCache.root)).toEqual(['cache']);
    expect(hub.bytesServed()).toBe(0);
  });
});
