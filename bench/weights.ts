// npm run bench:weights — weights as a lifecycle step, in figures: time to Ready of a replica
// whose 500 MB model (12 files) comes from the stand-in hub, cold (fetched) and cached (a
// second replica on the same host), and the fetch's throughput beside curl fetching the same
// files from the same hub into the same filesystem in the same run. Figures, not asserts.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery } from '../workflows/definitions.js';
import { startStandInHub, type StandInHub } from '../test/helpers/stand-in-hub.js';
import { startStack, stopEverythingStarted } from './stack.js';

const MB = 1_000_000;
const REPO = 'llmgw-bench/weights-500m';
const FILES = [
  { path: 'config.json', size: 800 },
  { path: 'tokenizer.json', size: 9_000 },
  ...Array.from({ length: 10 }, (_, i) => ({ path: `model-${String(i + 1).padStart(5, '0')}-of-00010.safetensors`, size: 50 * MB })),
];
const TOTAL = FILES.reduce((sum, f) => sum + f.size, 0);

function catalogFile(): string {
  const file = join(mkdtempSync(join(tmpdir(), 'llmgw-bench-weights-')), 'catalog.yaml');
  writeFileSync(
    file,
    `models:
  - name: weights
    source: hf://${REPO}
    profiles:
      - { name: p, engine: fake, gpuClass: H100, gpusPerNode: 1, startupTimeoutSeconds: 120 }
`,
  );
  return file;
}

async function readyAt(client: Client, name: string, count: number, since: number): Promise<number> {
  for (;;) {
    const view = await client.workflow
      .getHandle(`deployment/${name}`)
      .query(deploymentStatusQuery)
      .catch(() => undefined);
    if (view && view.ready >= count) return Date.now() - since;
    if (Date.now() - since > 300_000) throw new Error(`${name} not at ${count} Ready after 300 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The fetchWeights activity's own time, from scheduled to completed, in the replica's history. */
async function fetchSeconds(client: Client, replicaId: string): Promise<number> {
  const events = (await client.workflow.getHandle(replicaId).fetchHistory()).events ?? [];
  const time = (e: (typeof events)[number]): number =>
    Number(e.eventTime?.seconds ?? 0) * 1000 + Math.round((e.eventTime?.nanos ?? 0) / 1e6);
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'fetchWeights');
  const done = events.find((e) => Number(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? -1) === Number(scheduled?.eventId));
  if (!scheduled || !done) return NaN;
  return (time(done) - time(scheduled)) / 1000;
}

/** curl fetching the same files, four at a time (as the agent does), onto the same disk. */
function curlSeconds(hub: StandInHub): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-curl-'));
  const args = ['-sS', '--fail', '--parallel', '--parallel-max', '4'];
  for (const f of FILES) args.push('-o', join(dir, f.path), `${hub.url}/${REPO}/resolve/main/${f.path}`);
  const started = Date.now();
  return new Promise((resolve, reject) => {
    execFile('curl', args, (error) => {
      rmSync(dir, { recursive: true, force: true });
      if (error) reject(error);
      else resolve((Date.now() - started) / 1000);
    });
  });
}

const rate = (seconds: number): string => `${(TOTAL / MB / seconds).toFixed(0)} MB/s`;

async function main(): Promise<void> {
  const hub = await startStandInHub();
  hub.addRepo({ repo: REPO, files: FILES });
  const weightsDir = mkdtempSync(join(tmpdir(), 'llmgw-bench-weights-cache-'));
  const stack = await startStack({
    hosts: 1,
    catalog: catalogFile(),
    env: { HF_ENDPOINT: hub.url },
    agentArgs: () => ['--weights-dir', weightsDir],
  });
  try {
    console.log(
      `weights benchmark: ${(TOTAL / MB).toFixed(0)} MB in ${FILES.length} files from the stand-in hub on loopback, no bandwidth limit, fake engine (loads at 2 GB/s), 2-core machine`,
    );
    const curl = await curlSeconds(hub);
    hub.resetCounter();

    const name = `bench-weights-${Date.now().toString(36)}`;
    const started = Date.now();
    await stack.client.workflow.start('deployModel', {
      workflowId: `deployment/${name}`,
      taskQueue: 'llmgw',
      args: [{ model: 'weights', name, replicas: 1 }],
    });
    const cold = await readyAt(stack.client, name, 1, started);
    const fetch = await fetchSeconds(stack.client, `replica/${name}/1`);
    const served = hub.bytesServed();

    hub.resetCounter();
    const scaledAt = Date.now();
    if ((await stack.llmgw(['scale', name, '2'])) !== 0) throw new Error('llmgw scale failed');
    const cached = await readyAt(stack.client, name, 2, scaledAt);
    const cachedFetch = await fetchSeconds(stack.client, `replica/${name}/2`);

    console.log(
      `time to Ready, cold (fetched):   ${(cold / 1000).toFixed(2)} s (of which fetchWeights ${fetch.toFixed(2)} s; ${(served / MB).toFixed(0)} MB served)`,
    );
    console.log(
      `time to Ready, cached (2nd):     ${(cached / 1000).toFixed(2)} s (of which fetchWeights ${cachedFetch.toFixed(2)} s; ${(hub.bytesServed() / MB).toFixed(0)} MB served)`,
    );
    console.log(
      `fetch throughput: llmgw ${rate(fetch)} · curl ${rate(curl)} (4 files at a time, same hub, same disk) · ratio ${(curl / fetch).toFixed(2)}`,
    );
    await stack.llmgw(['undeploy', name]);
  } finally {
    await stack.stop();
    await hub.close();
    rmSync(weightsDir, { recursive: true, force: true });
  }
}

main().catch(async (error: unknown) => {
  console.error(error);
  await stopEverythingStarted();
  process.exitCode = 1;
});
