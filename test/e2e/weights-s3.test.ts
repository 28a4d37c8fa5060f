// S3 sources end to end against a real S3-speaking server (moto, test/helpers/moto-server.ts):
// an s3:// model is pinned to a digest at deploy, fetched once per host through the agent's
// fetchWeights (If-Match each ETag, verified, resumed with a Range request), run by the fake
// engine from its snapshot, refetched file by file after a flipped byte; bad sources (no
// bucket, no objects, refused credentials, unknown scheme) are refused saying what to do.
import { createHash } from 'node:crypto';
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  realpathSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { modelSourceOf, type S3Source } from '../../common/model-source.js';
import { pinS3Source } from '../../activities/s3-pin.js';
import { fetchS3Revision } from '../../agent/weights/s3-fetch.js';
import { cachedRevisionOf, incompletePath } from '../../agent/weights/cache-layout.js';
import { FetchProgress } from '../../agent/weights/progress.js';
import { s3ClientFromEnv } from '../../common/s3-store.js';
import { enginesOf, eventually, inventory, runLlmgw, spawnLlmgw, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';
import { startMotoServer, type MotoServer } from '../helpers/moto-server.js';

const MB = 1_000_000;
const fleet = useIsolatedFleet({ ownTemporal: 'weights-s3', controlWorkers: 0 });
const nodeId = uniqueId('s3host');
const weightsDir = mkdtempSync(join(tmpdir(), 'llmgw-s3-cache-'));
let moto: MotoServer;
/** The uploaded files: path under the prefix → sha256. */
let uploaded: Record<string, string>;

// Two single-part objects, one multipart (5 MiB parts), and a small file.
const UPLOAD = `
import hashlib
from boto3.s3.transfer import TransferConfig
s3.create_bucket(Bucket='wbucket')
out = {}
def put(path, body, multipart=False):
    key = 'llama/' + path
    if multipart:
        import io
        s3.upload_fileobj(io.BytesIO(body), 'wbucket', key, Config=TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024))
    else:
        s3.put_object(Bucket='wbucket', Key=key, Body=body)
    out[path] = hashlib.sha256(body).hexdigest()
put('config.json', b'{"architectures": ["LlamaForCausalLM"]}')
put('model-00001-of-00002.safetensors', bytes((i * 7) % 251 for i in range(6 * 1000 * 1000)))
put('model-00002-of-00002.safetensors', bytes((i * 13) % 251 for i in range(12 * 1000 * 1000)), multipart=True)
put('tokenizer/tokenizer.json', b'{"version": "1.0"}' * 100)
s3.create_bucket(Bucket='wempty')
print(json.dumps(out))
`;

function catalog(): string {
  const profile = `
    profiles:
      - { name: p, engine: fake, gpuClass: WEIGHTS, gpusPerNode: 1, args: ["--weights-load-rate", "200000000"], startupTimeoutSeconds: 60 }`;
  const models = {
    s3llama: 's3://wbucket/llama',
    s3nobucket: 's3://no-such-bucket/llama',
    s3empty: 's3://wempty/llama',
    s3denied: 's3://wdenied/llama',
  };
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-s3-catalog-')), 'catalog.yaml');
  writeFileSync(
    file,
    `defaults: { drainGraceSeconds: 1 }\nmodels:\n${Object.entries(models)
      .map(([name, source]) => `  - name: ${name}\n    source: ${source}${profile}`)
      .join('\n')}\n`,
  );
  return file;
}

function status(name: string): Promise<DeploymentView> {
  return fleet.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
}

async function readyCount(name: string, count: number): Promise<void> {
  await eventually(`${name} at ${count} Ready`, async () => ((await status(name)).ready === count ? true : undefined), 90_000, 500);
}

function sha256Tree(root: string, dir = root): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) Object.assign(out, sha256Tree(root, path));
    else out[path.slice(root.length + 1)] = createHash('sha256').update(readFileSync(path)).digest('hex');
  }
  return out;
}

beforeAll(async () => {
  moto = await startMotoServer({ deniedBuckets: ['wdenied'] });
  uploaded = await moto.python<Record<string, string>>(UPLOAD);
  const worker = spawnLlmgw(['worker', '--catalog', catalog()], moto.env(moto.admin));
  fleet.workers.push(worker);
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  await fleet.agent(nodeId, { inventory: inventory('weightsx8.yaml'), extra: ['--weights-dir', weightsDir], env: moto.env(moto.admin) });
}, 240_000);

afterAll(async () => {
  await moto?.stop();
});

describe('s3:// sources', () => {
  it('deploys an s3:// model pinned to a digest, fetched once for two replicas, run from the verified snapshot', async () => {
    const name = uniqueId('s3llama');
    const deployed = await runLlmgw(['deploy', 's3llama', '--name', name, '--replicas', '2']);
    expect(deployed.code, deployed.output).toBe(0);
    await readyCount(name, 2);
    const objects = Object.keys(uploaded).length;
    expect(moto.gets('wbucket', 'llama/')).toBe(objects);

    const engines = enginesOf([nodeId]);
    expect(engines).toHaveLength(2);
    const weights = engines.map((e) => {
      const argv = readFileSync(`/proc/${e.pid}/cmdline`, 'utf8').split('\0');
      expect(e.env.HF_HUB_OFFLINE).toBe('1');
      return argv[argv.indexOf('--weights') + 1]!;
    });
    expect(weights[0]).toMatch(new RegExp(`^${weightsDir}/s3--wbucket--llama/snapshots/[0-9a-f]{64}$`));
    expect(weights[1]).toBe(weights[0]);
    expect(sha256Tree(weights[0]!)).toEqual(uploaded);

    // A later replica on the host: no request to the store at all.
    expect((await runLlmgw(['scale', name, '3'])).code).toBe(0);
    await readyCount(name, 3);
    expect(moto.gets('wbucket', 'llama/')).toBe(objects);

    // A flipped byte in a cached file: the next start fetches that object again, alone.
    const victim = realpathSync(join(weights[0]!, 'model-00001-of-00002.safetensors'));
    const fd = openSync(victim, 'r+');
    writeSync(fd, Buffer.from([0x42]), 0, 1, 4321);
    closeSync(fd);
    expect((await runLlmgw(['scale', name, '4'])).code).toBe(0);
    await readyCount(name, 4);
    expect(moto.gets('wbucket', 'llama/')).toBe(objects + 1);
    expect(moto.gets('wbucket', 'llama/model-00001')).toBe(2);
    expect(sha256Tree(weights[0]!)).toEqual(uploaded);
    expect((await runLlmgw(['undeploy', name])).code).toBe(0);
  }, 240_000);

  it('resumes a cut file with a Range request; refuses an unknown key and objects replaced since the pin', async () => {
    const env = moto.env(moto.admin);
    const pinned = modelSourceOf(await pinS3Source(modelSourceOf('s3://wbucket/llama') as S3Source, env)) as S3Source;
    const client = s3ClientFromEnv(env);
    const fetch = (dir: string, as = client) => {
      const progress = new FetchProgress('s3://wbucket/llama', pinned.digest!);
      const done = fetchS3Revision({
        weightsDir: dir,
        source: pinned,
        client: as,
        who: 'the agent on gpu-7',
        progress,
        signal: new AbortController().signal,
        reserve: () => Promise.resolve(),
        log: () => undefined,
      });
      return { progress, done };
    };
    // 7 MB of the multipart file, as a killed agent leaves it: only the rest is fetched.
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-s3-resume-'));
    const big = 'model-00002-of-00002.safetensors';
    const etag = await moto.python<string>(`print(json.dumps(s3.head_object(Bucket='wbucket', Key='llama/${big}')['ETag'].strip('"')))`);
    const partial = incompletePath(dir, cachedRevisionOf(pinned)!.repo, etag);
    mkdirSync(join(partial, '..'), { recursive: true });
    writeFileSync(partial, Buffer.from(Array.from({ length: 7 * MB }, (_, i) => (i * 13) % 251)));
    const first = fetch(dir);
    const result = await first.done;
    expect(result.fetched.find((f) => f.path === big)?.why).toBe('resumed');
    expect(result.bytesFetched).toBe(result.bytesTotal - 7 * MB);
    expect(sha256Tree(result.snapshotPath)).toEqual(uploaded);

    // A host whose key the store does not know is told which variables to set.
    const stranger = s3ClientFromEnv(moto.env({ AWS_ACCESS_KEY_ID: 'AKIAUNKNOWNKEY000000', AWS_SECRET_ACCESS_KEY: 'not-a-key' }));
    await expect(fetch(mkdtempSync(join(tmpdir(), 'llmgw-s3-stranger-')), stranger).done).rejects.toThrow(
      /refused the credentials of the agent on gpu-7 \(InvalidAccessKeyId: .*set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY/,
    );
    stranger.destroy();

    // The object replaced in the store: a host that lists the prefix again refuses it...
    await moto.python(`s3.put_object(Bucket='wbucket', Key='llama/config.json', Body=b'{"changed": true}'); print('{}')`);
    await expect(fetch(mkdtempSync(join(tmpdir(), 'llmgw-s3-moved-'))).done).rejects.toThrow(
      /s3:\/\/wbucket\/llama changed since the revision was pinned: .*llmgw rollout NAME/,
    );
    // ...and one that has the listing but not the file gets If-Match refused, never other bytes.
    const { rmSync } = await import('node:fs');
    rmSync(realpathSync(join(result.snapshotPath, 'config.json')));
    await expect(fetch(dir).done).rejects.toThrow(/config\.json was replaced since the revision was pinned/);
    client.destroy();
  }, 120_000);

  it("fetches a revision overwritten since the pin from a versioned bucket's versions", async () => {
    const env = moto.env(moto.admin);
    const original = await moto.python<Record<string, string>>(`
import hashlib
s3.create_bucket(Bucket='wversioned')
s3.put_bucket_versioning(Bucket='wversioned', VersioningConfiguration={'Status': 'Enabled'})
files = {'config.json': b'{"v": 1}', 'model.safetensors': bytes(range(256)) * 8192}
for path, body in files.items():
    s3.put_object(Bucket='wversioned', Key='m/' + path, Body=body)
print(json.dumps({path: hashlib.sha256(body).hexdigest() for path, body in files.items()}))`);
    const pinned = modelSourceOf(await pinS3Source(modelSourceOf('s3://wversioned/m') as S3Source, env)) as S3Source;
    // Versions are dated to the second: the changes come in a later one than the pin.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await moto.python(`
s3.put_object(Bucket='wversioned', Key='m/config.json', Body=b'{"v": 2}')
s3.delete_object(Bucket='wversioned', Key='m/model.safetensors')
s3.put_object(Bucket='wversioned', Key='m/added.txt', Body=b'after the pin')
print('{}')`);
    const client = s3ClientFromEnv(env);
    const logged: string[] = [];
    const result = await fetchS3Revision({
      weightsDir: mkdtempSync(join(tmpdir(), 'llmgw-s3-versioned-')),
      source: pinned,
      client,
      who: 'the agent on gpu-7',
      progress: new FetchProgress('s3://wversioned/m', pinned.digest!),
      signal: new AbortController().signal,
      reserve: () => Promise.resolve(),
      log: (line) => logged.push(line),
    });
    client.destroy();
    // The pinned bytes, by version id: not the overwritten config, not the added file.
    expect(sha256Tree(result.snapshotPath)).toEqual(original);
    expect(logged.join('\n')).toMatch(/changed since the pin; fetching the pinned objects by version id/);
  }, 60_000);

  it('refuses bad sources naming what to do, and starts nothing', async () => {
    const cases: [string, RegExp][] = [
      [
        's3nobucket',
        /bucket "no-such-bucket" does not exist at http:\/\/127\.0\.0\.1:\d+ .*AWS_ENDPOINT_URL_S3 in the environment of the control worker/,
      ],
      [
        's3empty',
        /no objects under s3:\/\/wempty\/llama\/ at http:\/\/127\.0\.0\.1:\d+; upload the model's files there, or correct the prefix/,
      ],
      ['s3denied', /refused the credentials of the control worker .*AccessDenied.*set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY/],
    ];
    for (const [model, message] of cases) {
      const name = uniqueId(model);
      const deploy = await runLlmgw(['deploy', model, '--name', name, '--replicas', '1', '--wait', '--timeout', '30']);
      expect(deploy.code, deploy.output).not.toBe(0);
      expect(deploy.output).toMatch(message);
      for (const id of [`deployment/${name}`, `replica/${name}/1`]) {
        const state = await fleet.client.workflow
          .getHandle(id)
          .describe()
          .then(
            (d) => d.status.name,
            () => 'NOT_FOUND',
          );
        expect(state, id).not.toBe('RUNNING');
      }
      expect(deploy.output).not.toContain(moto.admin.AWS_SECRET_ACCESS_KEY);
    }
    // The key is the processes' own: in no log line, as in no payload.
    for (const proc of [...fleet.workers, fleet.agentOf(nodeId)]) expect(proc.output()).not.toContain(moto.admin.AWS_SECRET_ACCESS_KEY);

    const file = join(mkdtempSync(join(tmpdir(), 'llmgw-s3-gs-')), 'catalog.yaml');
    writeFileSync(
      file,
      'models:\n  - name: g\n    source: gs://bucket/llama\n    profiles:\n      - { name: p, engine: fake, gpuClass: WEIGHTS, gpusPerNode: 1 }\n',
    );
    const validate = await runLlmgw(['catalog', 'validate', file]);
    expect(validate.code).not.toBe(0);
    expect(validate.output).toMatch(/models\[0\]\.source.*unknown scheme "gs:\/\/" \(expected hf:\/\/, s3:\/\/, file:\/\//);
  }, 180_000);
});
