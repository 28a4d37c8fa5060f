// Placed near, and the operator's hands on host caches: `llmgw weights prefetch` fetches a
// model onto one host without placing anything, `llmgw weights ls` shows what each host holds
// (its agent's report), a replica then lands on the host that holds it and starts with no
// fetch, and `llmgw weights rm` refuses weights a shard runs (naming it), then removes them once
// nothing does. Its own Temporal server: the control worker must know the stand-in hub.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import {
  endFleet,
  eventually,
  inventory,
  runLlmgw,
  spawnLlmgw,
  startSimAgent,
  testClient,
  uniqueId,
  useOwnTemporal,
} from '../helpers/fleet.js';
import { startStandInHub, type StandInHub } from '../helpers/stand-in-hub.js';
import { oneModelCatalog, writeCatalogFile } from '../helpers/catalog-file.js';

const MB = 1_000_000;
const REPO = 'llmgw-test/w-near';
const FILES = [
  { path: 'config.json', size: 500 },
  ...[1, 2, 3].map((i) => ({ path: `model-0000${i}-of-00003.safetensors`, size: 4 * MB })),
];
const BYTES = FILES.reduce((sum, f) => sum + f.size, 0);

let server: { stop(): Promise<void> };
let temporal: { client: Client; close: () => Promise<void> };
let hub: StandInHub;
let commit: string;
const hostA = uniqueId('near-a');
const hostB = uniqueId('near-b');

beforeAll(async () => {
  server = await useOwnTemporal('weights-near');
  temporal = await testClient();
  hub = await startStandInHub();
  commit = hub.addRepo({ repo: REPO, files: FILES });
  const profile =
    '{ name: p, engine: fake, gpuClass: WEIGHTS, gpusPerNode: 1, args: ["--weights-load-rate", "200000000"], startupTimeoutSeconds: 60 }';
  const catalog = writeCatalogFile('llmgw-near-catalog-', oneModelCatalog('wnear', `hf://${REPO}`, profile));
  const worker = spawnLlmgw(['worker', '--catalog', catalog], { HF_ENDPOINT: hub.url });
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  await Promise.all(
    [hostA, hostB].map((nodeId) =>
      startSimAgent(nodeId, {
        inventory: inventory('weightsx8.yaml'),
        extra: ['--weights-dir', mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-weights-`))],
        env: { HF_ENDPOINT: hub.url },
      }),
    ),
  );
}, 180_000);

afterAll(async () => {
  await endFleet({ nodeIds: [hostA, hostB], server, closeClient: temporal?.close });
  await hub?.close();
});

describe('weights placed near', () => {
  it('prefetches onto one host, places the replica there with no fetch, and refuses to remove weights in use', async () => {
    // Prefetch onto B alone, with progress, placing nothing.
    hub.setBandwidth(1 * MB);
    const prefetched = await runLlmgw(['weights', 'prefetch', 'wnear', '--nodes', hostB], {}, 120_000);
    hub.setBandwidth(0);
    expect(prefetched.code, prefetched.output).toBe(0);
    expect(prefetched.output).toContain(`${hostB}: holds hf://${REPO}@${commit}`);
    expect(prefetched.output).toMatch(/Fetching \d+% ·/);
    expect(hub.bytesServed()).toBeGreaterThanOrEqual(BYTES);

    // B reports what it holds; A holds nothing.
    await eventually(
      'B reporting the revision',
      async () => {
        const shown = await runLlmgw(['weights', 'ls', '--json']);
        const rows = JSON.parse(shown.output) as { nodeId: string; repo: string; commit: string; bytes: number; inUseBy: string[] }[];
        return rows.length === 1 && rows[0]!.nodeId === hostB && rows[0]!.commit === commit && rows[0]!.bytes === BYTES ? true : undefined;
      },
      30_000,
      500,
    );

    // The replica goes where the weights are, and fetches nothing.
    hub.resetCounter();
    const name = uniqueId('wnear');
    const deployed = await runLlmgw(['deploy', 'wnear', '--name', name, '--replicas', '1', '--wait', '--timeout', '90'], {}, 120_000);
    expect(deployed.code, deployed.output).toBe(0);
    const view = await temporal.client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
    expect(view.replicas[0]?.nodes).toEqual([hostB]);
    expect(view.modelSource).toBe(`hf://${REPO}@${commit}`);
    expect(hub.bytesServed()).toBe(0);

    // In use: refused, naming the shard, and nothing removed.
    await eventually(
      'the revision in use on B',
      async () => {
        const listed = await runLlmgw(['weights', 'ls', hostB]);
        return listed.output.includes(`replica-${name}`) || listed.output.includes(`${name}`) ? true : undefined;
      },
      30_000,
      500,
    );
    const refused = await runLlmgw(['weights', 'rm', hostB, REPO]);
    expect(refused.code).not.toBe(0);
    expect(refused.output).toMatch(/in use by shard \S+ \(replica\//);
    expect(refused.output).toMatch(/Scale down, undeploy or roll/);

    // Once nothing runs it, it goes.
    expect((await runLlmgw(['undeploy', name], {}, 60_000)).code).toBe(0);
    await eventually(
      'removal accepted',
      async () => {
        const removed = await runLlmgw(['weights', 'rm', hostB, `${REPO}@${commit.slice(0, 8)}`]);
        return removed.code === 0 ? removed.output : undefined;
      },
      30_000,
      1_000,
    ).then((output) => expect(output).toContain(`removed hf://${REPO}@${commit}`));
    await eventually(
      'B reporting nothing',
      async () => ((await runLlmgw(['weights', 'ls', hostB])).output.includes('holds no weights') ? true : undefined),
      30_000,
      500,
    );
  }, 240_000);
});
