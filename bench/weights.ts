// npm run bench:weights — weights as a lifecycle step, in figures: time to Ready of a replica
// whose 500 MB model (12 files) comes from the stand-in hub, cold (fetched) and cached (a
// second replica on the same host), and the fetch's throughput beside curl fetching the same
// files from the same hub into the same filesystem in the same run: on loopback with no limit
// (CPU-bound on a small machine: hub, client and hashing share its cores), then over a 2 Gbit/s
// link (the hub's bandwidth limit, shared by all connections, as a host's uplink is). Figures,
// not asserts.
//
// Like with like: the stand-in hub runs in a process of its own, so neither client shares an
// event loop with it, and keeps its files on tmpfs, so they do not share the clients' disk;
// curl fetches the same 12 files, 4 at a time (`--parallel-max 4`, the agent's concurrency),
// into the same filesystem as the agent's weights cache; before each run, `sync` writes back
// what the previous one left dirty, so neither pays for the other's writeback. The machine is
// shared and its disk and CPU come and go, so the two alternate: curl, llmgw, curl, llmgw, …,
// curl, each llmgw fetch a cold one (a model of its own, not yet on the host), and the report
// gives every run and the medians. llmgw's throughput is over the transfer, what curl given the
// same 12 URLs does: from the first file's request to the last file hashed against the hub's
// digest, written aside and renamed (the activity's transferSeconds); the fetchWeights
// activity's whole time, scheduled to completed (listing the revision, linking the snapshot
// too), is printed beside it. curl verifies nothing; the line after it adds `openssl dgst -sha256` of
// the files curl fetched (the same OpenSSL sha256 as llmgw's, with the CPU's SHA instructions;
// coreutils' sha256sum has none and is 3-4 times slower here), for what verifying costs a
// client that does it afterwards.
import { execFile, fork, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery } from '../workflows/definitions.js';
import type { FetchWeightsResult } from '../agent/weights/activity.js';
import { startStandInHub } from '../test/helpers/stand-in-hub.js';
import { writeCatalogFile } from '../test/helpers/catalog-file.js';
import { startStack, stopEverythingStarted } from './stack.js';

const MB = 1_000_000;
const ROUNDS = Math.max(1, Number(process.env.LLMGW_BENCH_ROUNDS ?? 5));
const CONCURRENCY = 4;
const repoOf = (round: number): string => `llmgw-bench/weights-500m-${round}`;
const FILES = [
  { path: 'config.json', size: 800 },
  { path: 'tokenizer.json', size: 9_000 },
  ...Array.from({ length: 10 }, (_, i) => ({ path: `model-${String(i + 1).padStart(5, '0')}-of-00010.safetensors`, size: 50 * MB })),
];
const TOTAL = FILES.reduce((sum, f) => sum + f.size, 0);

/** What the bench asks the hub's process, and what it answers. */
type HubRequest = { op: 'bytesServed' } | { op: 'reset' } | { op: 'bandwidth'; bytesPerSecond: number };
type Hub = Awaited<ReturnType<typeof startHubProcess>>;
type Stack = Awaited<ReturnType<typeof startStack>>;
/** The link of the second half: 2 Gbit/s, for both clients alike. */
const LINK_BYTES_PER_SECOND = 250 * MB;
type HubMessage = { url: string } | { bytesServed: number };

function catalogFile(): string {
  const models = Array.from(
    { length: 2 * ROUNDS },
    (_, round) => `  - name: weights-${round}
    source: hf://${repoOf(round)}
    profiles:
      - { name: p, engine: fake, gpuClass: H100, gpusPerNode: 1, startupTimeoutSeconds: 300 }
`,
  );
  return writeCatalogFile('llmgw-bench-weights-', `models:\n${models.join('')}`);
}

/** The stand-in hub in a process of its own, with one 500 MB repository per round. */
async function startHubProcess(): Promise<{ url: string; ask(request: HubRequest): Promise<number>; stop(): Promise<void> }> {
  const child: ChildProcess = fork(__filename, ['--role', 'hub', String(2 * ROUNDS)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (m: HubMessage) => ('url' in m ? resolve(m.url) : reject(new Error('hub: unexpected message'))));
    child.once('exit', (code) => reject(new Error(`the stand-in hub exited with ${code}`)));
  });
  return {
    url,
    ask: (request) =>
      new Promise((resolve) => {
        child.once('message', (m: HubMessage) => resolve('bytesServed' in m ? m.bytesServed : 0));
        child.send(request);
      }),
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

async function runHub(rounds: number): Promise<void> {
  // On tmpfs where there is one: the hub's own writes and reads must not share the clients' disk.
  const hub = await startStandInHub(existsSync('/dev/shm') ? { filesIn: '/dev/shm' } : {});
  for (let round = 0; round < rounds; round++) hub.addRepo({ repo: repoOf(round), files: FILES });
  process.on('message', (request: HubRequest) => {
    if (request.op === 'reset') hub.resetCounter();
    if (request.op === 'bandwidth') hub.setBandwidth(request.bytesPerSecond);
    process.send?.({ bytesServed: hub.bytesServed() } satisfies HubMessage);
  });
  process.on('SIGTERM', () => void hub.close().then(() => process.exit(0)));
  process.send?.({ url: hub.url } satisfies HubMessage);
}

async function readyAt(client: Client, name: string, count: number, since: number): Promise<number> {
  for (;;) {
    const view = await client.workflow
      .getHandle(`deployment/${name}`)
      .query(deploymentStatusQuery)
      .catch(() => undefined);
    if (view && view.ready >= count) return Date.now() - since;
    if (Date.now() - since > 300_000) throw new Error(`${name} not at ${count} Ready after 300 s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The fetchWeights activity's own time, scheduled to completed, and the transfer's time within it, from the replica's history. */
async function fetchSeconds(client: Client, replicaId: string): Promise<{ activity: number; transfer: number }> {
  const events = (await client.workflow.getHandle(replicaId).fetchHistory()).events ?? [];
  const time = (e: (typeof events)[number]): number =>
    Number(e.eventTime?.seconds ?? 0) * 1000 + Math.round((e.eventTime?.nanos ?? 0) / 1e6);
  const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'fetchWeights');
  const done = events.find((e) => Number(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? -1) === Number(scheduled?.eventId));
  if (!scheduled || !done) return { activity: NaN, transfer: NaN };
  const payload = done.activityTaskCompletedEventAttributes?.result?.payloads?.[0];
  const result = payload ? client.options.loadedDataConverter.payloadConverter.fromPayload<FetchWeightsResult>(payload) : undefined;
  return { activity: (time(done) - time(scheduled)) / 1000, transfer: result?.transferSeconds ?? NaN };
}

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { maxBuffer: 1 << 20 }, (error) => (error ? reject(error) : resolve()));
  });
}

/** curl fetching round `round`'s files, 4 at a time, onto the cache's disk; and their sha256 after. */
async function curlSeconds(hubUrl: string, round: number): Promise<{ fetch: number; verified: number }> {
  await run('sync', []);
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-curl-'));
  const args = ['-sS', '--fail', '--parallel', '--parallel-max', String(CONCURRENCY)];
  for (const f of FILES) args.push('-o', join(dir, f.path), `${hubUrl}/${repoOf(round)}/resolve/main/${f.path}`);
  try {
    const started = Date.now();
    await run('curl', args);
    const fetched = Date.now();
    await run('openssl', ['dgst', '-sha256', ...FILES.map((f) => join(dir, f.path))]);
    return { fetch: (fetched - started) / 1000, verified: (Date.now() - started) / 1000 };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const rate = (seconds: number): string => `${(TOTAL / MB / seconds).toFixed(0)} MB/s`;
const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

interface Rounds {
  curl: { fetch: number; verified: number }[];
  llmgw: { activity: number; transfer: number }[];
}

/**
 * curl, llmgw, curl, …, curl: ROUNDS cold llmgw fetches of the models from `first` on, each
 * between two curl fetches of the same files. The first model is then scaled to a second
 * replica on the same host (`cached`, once).
 */
async function alternate(
  stack: Stack,
  hub: Hub,
  first: number,
  onFirst?: (name: string, readyMs: number) => Promise<void>,
): Promise<Rounds> {
  const rounds: Rounds = { curl: [], llmgw: [] };
  for (let i = 0; i < ROUNDS; i++) {
    const model = first + i;
    rounds.curl.push(await curlSeconds(hub.url, model));
    await hub.ask({ op: 'reset' });
    await run('sync', []);
    const name = `bench-weights-${model}-${Date.now().toString(36)}`;
    const started = Date.now();
    await stack.client.workflow.start('deployModel', {
      workflowId: `deployment/${name}`,
      taskQueue: 'llmgw',
      args: [{ model: `weights-${model}`, name, replicas: 1 }],
    });
    const ready = await readyAt(stack.client, name, 1, started);
    rounds.llmgw.push(await fetchSeconds(stack.client, `replica/${name}/1`));
    if (i === 0) await onFirst?.(name, ready);
    await stack.llmgw(['undeploy', name]);
  }
  rounds.curl.push(await curlSeconds(hub.url, first + ROUNDS - 1));
  return rounds;
}

function report(rounds: Rounds): void {
  const { curl, llmgw } = rounds;
  console.log(`  runs, in order (seconds for ${(TOTAL / MB).toFixed(0)} MB):`);
  for (let round = 0; round < ROUNDS; round++) {
    console.log(
      `    curl ${curl[round]!.fetch.toFixed(2)} (then sha256 ${curl[round]!.verified.toFixed(2)}) · llmgw ${llmgw[round]!.transfer.toFixed(2)} (activity ${llmgw[round]!.activity.toFixed(2)})`,
    );
  }
  console.log(`    curl ${curl[ROUNDS]!.fetch.toFixed(2)} (then sha256 ${curl[ROUNDS]!.verified.toFixed(2)})`);
  const curlMedian = median(curl.map((c) => c.fetch));
  const verifiedMedian = median(curl.map((c) => c.verified));
  const llmgwMedian = median(llmgw.map((l) => l.transfer));
  const activityMedian = median(llmgw.map((l) => l.activity));
  console.log(
    `  fetch throughput (medians): llmgw ${rate(llmgwMedian)} (verified as it streams) · curl ${rate(curlMedian)} (not verified) · ratio ${(curlMedian / llmgwMedian).toFixed(2)} (goal ≥ 0.8)`,
  );
  console.log(
    `                              llmgw's whole activity (listing and linking too) ${rate(activityMedian)} · ratio ${(curlMedian / activityMedian).toFixed(2)}`,
  );
  console.log(
    `                              curl then openssl sha256 ${rate(verifiedMedian)} · ratio ${(verifiedMedian / llmgwMedian).toFixed(2)} (4 files at a time, same hub, same disk)`,
  );
}

async function main(): Promise<void> {
  const hub = await startHubProcess();
  // The agent opens its weights dir to the engine's user; curl's files go beside it, on the same disk.
  const weightsDir = mkdtempSync(join(tmpdir(), 'llmgw-bench-weights-cache-'));
  const stack = await startStack({
    hosts: 1,
    catalog: catalogFile(),
    env: { HF_ENDPOINT: hub.url },
    agentArgs: () => ['--weights-dir', weightsDir],
  });
  try {
    console.log(
      `weights benchmark: ${(TOTAL / MB).toFixed(0)} MB in ${FILES.length} files from the stand-in hub (its own process, files on tmpfs), fake engine (loads at 2 GB/s); ${os.cpus().length} CPUs, load ${os.loadavg()[0]!.toFixed(1)}; ${ROUNDS} rounds, curl and llmgw alternating`,
    );
    let cold = { ready: NaN, served: NaN };
    let cached = { ready: NaN, fetch: NaN, served: NaN };
    const loopback = await alternate(stack, hub, 0, async (name, ready) => {
      cold = { ready, served: await hub.ask({ op: 'bytesServed' }) };
      await hub.ask({ op: 'reset' });
      const scaledAt = Date.now();
      if ((await stack.llmgw(['scale', name, '2'])) !== 0) throw new Error('llmgw scale failed');
      const readyMs = await readyAt(stack.client, name, 2, scaledAt);
      const fetch = (await fetchSeconds(stack.client, `replica/${name}/2`)).activity;
      cached = { ready: readyMs, fetch, served: await hub.ask({ op: 'bytesServed' }) };
    });
    await hub.ask({ op: 'bandwidth', bytesPerSecond: LINK_BYTES_PER_SECOND });
    const link = await alternate(stack, hub, ROUNDS);

    console.log(
      `time to Ready, cold (fetched):   ${(cold.ready / 1000).toFixed(2)} s (of which fetchWeights ${loopback.llmgw[0]!.activity.toFixed(2)} s; ${(cold.served / MB).toFixed(0)} MB served)`,
    );
    console.log(
      `time to Ready, cached (2nd):     ${(cached.ready / 1000).toFixed(2)} s (of which fetchWeights ${cached.fetch.toFixed(2)} s; ${(cached.served / MB).toFixed(0)} MB served)`,
    );
    console.log('loopback, no bandwidth limit: CPU-bound here (hub, client and hashing share the CPUs)');
    report(loopback);
    console.log(`a ${((LINK_BYTES_PER_SECOND * 8) / 1e9).toFixed(0)} Gbit/s link (the hub's bandwidth limit, shared by every connection)`);
    report(link);
  } finally {
    await stack.stop();
    await hub.stop();
    rmSync(weightsDir, { recursive: true, force: true });
  }
}

const roleAt = process.argv.indexOf('--role');
if (roleAt < 0) {
  main().catch(async (error: unknown) => {
    console.error(error);
    await stopEverythingStarted();
    process.exitCode = 1;
  });
} else {
  runHub(Number(process.argv[roleAt + 2])).catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
