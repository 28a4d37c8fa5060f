// Weights as a lifecycle step, end to end: a deployment whose source is the stand-in hub is
// pinned to a commit, fetched once per host with progress in the fetch activity's details,
// verified and cached in the Hugging Face layout (python huggingface_hub reads it offline), run
// from its snapshot, resumed after a kill -9 of the agent, and refetched file by file when a
// byte flips. Its own Temporal server: the control worker must know the stand-in hub.
import { chmodSync, readFileSync, mkdtempSync, writeFileSync, openSync, writeSync, closeSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { testClient, uniqueId, useOwnTemporal } from '../helpers/temporal.js';
import {
  enginesOf,
  eventually,
  INVENTORIES,
  killEnginesOf,
  runLlmgw,
  spawnLlmgw,
  startSimAgent,
  stopAll,
  type LlmgwProcess,
} from '../helpers/processes.js';
import { startStandInHub, type StandInHub } from '../helpers/stand-in-hub.js';
import { HASH_SNAPSHOT, hfPythonMissing, runHfPython } from '../helpers/hf-python.js';

const MB = 1_000_000;
const MAIN = 'llmgw-test/w-main';
const KILL = 'llmgw-test/w-kill';
const GATED = 'llmgw-test/w-gated';
const shards = (prefix: string, count: number, size: number) =>
  Array.from({ length: count }, (_, i) => ({
    path: `${prefix}-${String(i + 1).padStart(5, '0')}-of-${String(count).padStart(5, '0')}.safetensors`,
    size,
  }));
const MAIN_FILES = [{ path: 'config.json', size: 700 }, { path: 'tokenizer.json', size: 3000 }, ...shards('model', 6, 8 * MB)];
const MAIN_BYTES = MAIN_FILES.reduce((sum, f) => sum + f.size, 0);
const KILL_FILES = [{ path: 'config.json', size: 700 }, ...shards('model', 4, 10 * MB)];
const KILL_BYTES = KILL_FILES.reduce((sum, f) => sum + f.size, 0);

let ownTemporal: { stop(): Promise<void> };
let client: Client;
let closeClient: () => Promise<void>;
let hub: StandInHub;
let mainCommit: string;
let agent: LlmgwProcess;
let stateDir: string;
let portRange: string;
const nodeId = uniqueId('weights');
const weightsDir = mkdtempSync(join(tmpdir(), 'llmgw-weights-cache-'));
const sharedDir = mkdtempSync(join(tmpdir(), 'llmgw-weights-shared-'));
// A shared filesystem the engines read in place, as their unprivileged user does.
chmodSync(sharedDir, 0o755);

function catalog(): string {
  const profile = `
    profiles:
      - { name: p, engine: fake, gpuClass: WEIGHTS, gpusPerNode: 1, args: ["--weights-load-rate", "200000000"], startupTimeoutSeconds: 60 }`;
  const text = `defaults: { drainGraceSeconds: 1 }
models:
  - name: wmain
    source: hf://${MAIN}${profile}
  - name: wkill
    source: hf://${KILL}${profile}
  - name: wgated
    source: hf://${GATED}${profile}
  - name: wfile
    source: file://${sharedDir}${profile}
`;
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-weights-catalog-')), 'catalog.yaml');
  writeFileSync(file, text);
  return file;
}

async function startAgent(): Promise<void> {
  const started = await startSimAgent(nodeId, {
    inventory: join(INVENTORIES, 'weightsx8.yaml'),
    ...(stateDir ? { stateDir, range: portRange } : {}),
    extra: ['--weights-dir', weightsDir],
    env: { HF_ENDPOINT: hub.url },
  });
  agent = started.proc;
  stateDir = started.stateDir;
  portRange = started.range;
}

function status(name: string): Promise<DeploymentView> {
  return client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
}

async function readyCount(name: string, count: number, timeoutMs = 90_000): Promise<void> {
  await eventually(`${name} at ${count} Ready`, async () => ((await status(name)).ready === count ? true : undefined), timeoutMs, 500);
}

function argvOf(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
}

/** The heartbeat details of the replica's fetchWeights activity now, if one is pending. */
async function fetchDetails(replicaId: string): Promise<{ bytesDone: number; bytesTotal: number; summary: string } | undefined> {
  const described = await client.workflow.getHandle(replicaId).describe();
  const pending = described.raw.pendingActivities?.find((a) => a.activityType?.name === 'fetchWeights');
  const payload = pending?.heartbeatDetails?.payloads?.[0]?.data;
  if (!payload) return undefined;
  return JSON.parse(Buffer.from(payload).toString('utf8')) as { bytesDone: number; bytesTotal: number; summary: string };
}

beforeAll(async () => {
  const missing = hfPythonMissing();
  if (missing) throw new Error(missing);
  ownTemporal = await useOwnTemporal('weights');
  ({ client, close: closeClient } = await testClient());
  hub = await startStandInHub();
  mainCommit = hub.addRepo({ repo: MAIN, files: MAIN_FILES });
  hub.addRepo({ repo: KILL, files: KILL_FILES });
  hub.addRepo({ repo: GATED, files: [{ path: 'config.json', size: 100 }], token: 'hf_stand_in_token' });
  writeFileSync(join(sharedDir, 'config.json'), '{"architectures": ["LlamaForCausalLM"]}');
  writeFileSync(join(sharedDir, 'model.safetensors'), Buffer.alloc(2 * MB, 7));
  const worker = spawnLlmgw(['worker', '--catalog', catalog()], { HF_ENDPOINT: hub.url });
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  await startAgent();
}, 180_000);

// A failed test must not leave the next one a throttled hub.
afterEach(() => hub?.setBandwidth(0));

afterAll(async () => {
  await stopAll();
  await killEnginesOf([nodeId]);
  await closeClient?.();
  await hub?.close();
  await ownTemporal?.stop();
});

describe('weights as a lifecycle step', () => {
  it('fetches a hub model once for two replicas on one host, with progress, and runs them from the verified snapshot', async () => {
    const name = uniqueId('wmain');
    hub.setBandwidth(1.5 * MB);
    const deployed = await runLlmgw(['deploy', 'wmain', '--name', name, '--replicas', '2']);
    expect(deployed.code, deployed.output).toBe(0);

    // Progress advances in the fetch activity's details (what `temporal workflow describe` shows).
    const seen: number[] = [];
    let summary = '';
    let statusLine = '';
    await eventually(
      'two advancing progress reports',
      async () => {
        for (const replica of (await status(name)).replicas) {
          const details = await fetchDetails(replica.replicaId).catch(() => undefined);
          if (details && details.bytesDone > 0 && !seen.includes(details.bytesDone)) {
            seen.push(details.bytesDone);
            summary = details.summary;
            expect(details.bytesTotal).toBe(MAIN_BYTES);
          }
        }
        if (!statusLine) {
          const shown = await runLlmgw(['status', name]);
          if (/Fetching \d+% ·/.test(shown.output)) statusLine = shown.output;
        }
        return seen.length >= 2 && statusLine ? true : undefined;
      },
      60_000,
      1_000,
    );
    expect(summary).toMatch(/^Fetching \d+% · .* of 48\.0 MB/);
    // `llmgw status` shows the same line in the replica's row.
    expect(statusLine).toMatch(/Fetching \d+% · [\d.]+ [KMG]?B of 48\.0 MB/);
    hub.setBandwidth(0);
    await readyCount(name, 2);

    // Two replicas, one host, one copy of the bytes.
    expect(hub.bytesServed()).toBeGreaterThanOrEqual(MAIN_BYTES);
    expect(hub.bytesServed()).toBeLessThan(MAIN_BYTES * 1.05);

    // The engines were given the local snapshot of the pinned commit, and told to stay offline.
    const snapshot = join(weightsDir, 'models--llmgw-test--w-main', 'snapshots', mainCommit);
    const engines = enginesOf([nodeId]);
    expect(engines).toHaveLength(2);
    for (const engine of engines) {
      const argv = argvOf(engine.pid);
      expect(argv[argv.indexOf('--weights') + 1]).toBe(snapshot);
      expect(engine.env.HF_HUB_OFFLINE).toBe('1');
    }

    // What the engines read is what huggingface_hub itself accepts as the cached revision.
    const offline = await runHfPython<{ path: string; files: Record<string, string> }>(
      `${HASH_SNAPSHOT}
import json
from huggingface_hub import snapshot_download
path = snapshot_download('${MAIN}', revision='${mainCommit}', cache_dir='${weightsDir}', local_files_only=True)
print(json.dumps({'path': path, 'files': hash_tree(path)}))
`,
      { HF_HUB_OFFLINE: '1' },
    );
    expect(offline.path).toBe(snapshot);
    expect(offline.files).toEqual(Object.fromEntries(hub.filesAt(MAIN, mainCommit).map((f) => [f.path, f.sha256])));

    // A later replica on the host starts with no fetch at all.
    hub.resetCounter();
    expect((await runLlmgw(['scale', name, '3'])).code).toBe(0);
    await readyCount(name, 3);
    expect(hub.bytesServed()).toBe(0);

    // A byte flipped in a cached file: the next start fetches that file again, and only it.
    const victim = hub.filesAt(MAIN, mainCommit)[4]!;
    const blob = join(weightsDir, 'models--llmgw-test--w-main', 'blobs', victim.sha256);
    const fd = openSync(blob, 'r+');
    writeSync(fd, Buffer.from([0x42]), 0, 1, 1234);
    closeSync(fd);
    expect((await runLlmgw(['scale', name, '4'])).code).toBe(0);
    await readyCount(name, 4);
    expect(hub.bytesServedFor(victim.path)).toBe(victim.size);
    expect(hub.bytesServed()).toBe(victim.size);

    // The hub moves main: a replica added now still runs the pinned commit, with no fetch.
    const moved = hub.moveMain(MAIN, [MAIN_FILES[2]!.path]);
    hub.resetCounter();
    expect((await runLlmgw(['scale', name, '5'])).code).toBe(0);
    await readyCount(name, 5);
    expect(hub.bytesServed()).toBe(0);
    for (const engine of enginesOf([nodeId]).filter((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${name}/`))) {
      expect(argvOf(engine.pid).join(' ')).toContain(`snapshots/${mainCommit}`);
    }
    // A plain rollout keeps the pin (the catalog's source did not change), and `llmgw status` shows it.
    const kept = await runLlmgw(['rollout', name]);
    expect(kept.code, kept.output).toBe(0);
    expect(kept.output).toContain('nothing to roll out');
    expect((await runLlmgw(['status', name])).output).toContain(`weights hf://${MAIN}@${mainCommit}`);
    // --refresh-source moves to what main points at now, of which only the changed file is fetched.
    const rolled = await runLlmgw(['rollout', name, '--refresh-source', '--wait', '--timeout', '120'], {}, 150_000);
    expect(rolled.code, rolled.output).toBe(0);
    // The new commit was on the host before anything drained.
    expect(rolled.output).toMatch(/weights fetched ahead on/);
    await eventually(
      'every engine on the new commit',
      () => {
        const argvs = enginesOf([nodeId])
          .filter((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${name}/`))
          .map((e) => argvOf(e.pid).join(' '));
        return argvs.length === 5 && argvs.every((a) => a.includes(`snapshots/${moved}`)) ? true : undefined;
      },
      60_000,
    );
    expect(hub.bytesServed()).toBe(MAIN_FILES[2]!.size);
    expect((await runLlmgw(['undeploy', name])).code).toBe(0);
  }, 300_000);

  it('resumes a fetch cut by kill -9 of the agent from the bytes on disk', async () => {
    const name = uniqueId('wkill');
    hub.resetCounter();
    hub.setBandwidth(4 * MB);
    expect((await runLlmgw(['deploy', 'wkill', '--name', name, '--replicas', '1'])).code).toBe(0);
    await eventually('half the model served', () => (hub.bytesServed() > KILL_BYTES * 0.45 ? true : undefined), 60_000, 200);
    await agent.kill9();
    const partial = readdirSync(join(weightsDir, 'models--llmgw-test--w-kill', 'blobs')).filter((n) => n.endsWith('.incomplete'));
    expect(partial.length).toBeGreaterThan(0);
    hub.setBandwidth(0);
    await startAgent();
    await readyCount(name, 1, 120_000);
    expect(hub.bytesServed()).toBeGreaterThanOrEqual(KILL_BYTES);
    expect(hub.bytesServed()).toBeLessThan(KILL_BYTES * 1.1);
    expect((await runLlmgw(['undeploy', name])).code).toBe(0);
  }, 240_000);

  it('re-places a replica whose host has no room for the weights, with the reason shown', async () => {
    const small = uniqueId('wsmall');
    const smallAgent = await startSimAgent(small, {
      inventory: join(INVENTORIES, 'weightsx8.yaml'),
      extra: ['--weights-dir', mkdtempSync(join(tmpdir(), 'llmgw-weights-small-')), '--weights-budget', '1M'],
      env: { HF_ENDPOINT: hub.url },
    });
    // Only the small host may take it at first.
    expect((await runLlmgw(['nodes', 'cordon', nodeId])).code).toBe(0);
    const name = uniqueId('wfull');
    expect((await runLlmgw(['deploy', 'wkill', '--name', name, '--replicas', '1'])).code).toBe(0);
    // The small host refuses (its budget), so the replica avoids it; the refusal is the failed
    // fetchWeights activity in the replica's history, as the Web UI shows it.
    let shown = '';
    await eventually(
      'the replica avoiding the small host',
      async () => {
        shown = (await runLlmgw(['status', name])).output.replace(/[│\s]+/g, ' ');
        return shown.includes(`only nodes it failed on have room (${small})`) ? true : undefined;
      },
      60_000,
      1_000,
    ).catch((error: unknown) => {
      throw new Error(`${String(error)}; llmgw status last said:\n${shown}`);
    });
    const history = await client.workflow.getHandle(`replica/${name}/1`).fetchHistory();
    const refusals = (history.events ?? []).flatMap(
      (e) => e.activityTaskFailedEventAttributes?.failure?.cause?.message ?? e.activityTaskFailedEventAttributes?.failure?.message ?? [],
    );
    expect(refusals.join('\n')).toMatch(/no room for the weights: .* over its budget of 1\.0 MB/);
    expect((await runLlmgw(['nodes', 'uncordon', nodeId])).code).toBe(0);
    await readyCount(name, 1);
    expect((await status(name)).replicas[0]?.nodes).toEqual([nodeId]);
    expect(enginesOf([small])).toHaveLength(0);
    expect((await runLlmgw(['undeploy', name])).code).toBe(0);
    await smallAgent.proc.stop(5_000);
  }, 180_000);

  it('runs a file:// source in place, and refuses a gated repo without a token, naming what to do', async () => {
    const name = uniqueId('wfile');
    expect((await runLlmgw(['deploy', 'wfile', '--name', name, '--replicas', '1'])).code).toBe(0);
    await readyCount(name, 1);
    const engine = enginesOf([nodeId]).find((e) => e.env.LLMGW_REPLICA_ID?.startsWith(`replica/${name}/`))!;
    expect(argvOf(engine.pid)).toContain(sharedDir);
    expect((await runLlmgw(['undeploy', name])).code).toBe(0);

    const gated = await runLlmgw(['deploy', 'wgated', '--name', uniqueId('wgated'), '--replicas', '1', '--wait', '--timeout', '30']);
    expect(gated.code).not.toBe(0);
    expect(gated.output).toMatch(/needs a token for llmgw-test\/w-gated.*HF_TOKEN/);
    expect(gated.output).toMatch(/--pass-env HF_TOKEN/);
  }, 120_000);
});
