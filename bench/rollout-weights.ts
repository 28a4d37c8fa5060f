// npm run bench:rollout -- --weights — a rollout with weights to fetch: 4 replicas, one per
// simulated 8-GPU host (full hosts: drain-first), whose model comes from the stand-in hub with a
// bandwidth limit, rolled to a new commit (`--refresh-source` after `main` moved, every shard
// changed) once without fetching ahead (--no-prefetch) and once with, in the same run. Prints,
// side by side, the longest stretch with fewer routable replicas than desired, the fetch time,
// and how much fetch time fell inside the stretches below desired. Figures, not asserts.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery, rolloutUpdate } from '../workflows/definitions.js';
import { startStandInHub } from '../test/helpers/stand-in-hub.js';
import { oneModelCatalog, writeCatalogFile } from '../test/helpers/catalog-file.js';
import { startStack } from './stack.js';

const MB = 1_000_000;
const HOSTS = 4;
const REPO = 'llmgw-bench/rollout-weights';
const SHARDS = Array.from({ length: 4 }, (_, i) => ({ path: `model-0000${i + 1}-of-00004.safetensors`, size: 25 * MB }));
const FILES = [{ path: 'config.json', size: 600 }, ...SHARDS];
const BANDWIDTH = 50 * MB;

type Interval = [number, number];

function catalogFile(): string {
  const profile =
    '{ name: w8, engine: fake, gpuClass: H100, tensorParallel: 8, gpusPerNode: 8, args: ["--load-time", "1"], startupTimeoutSeconds: 120 }';
  return writeCatalogFile('llmgw-bench-rollw-', oneModelCatalog('rollweights', `hf://${REPO}`, profile));
}

/** Every fetchWeights activity of a workflow, scheduled to completed, in server time (ms). */
async function fetchIntervals(client: Client, workflowId: string): Promise<Interval[]> {
  const events = (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  const time = (e: (typeof events)[number]): number =>
    Number(e.eventTime?.seconds ?? 0) * 1000 + Math.round((e.eventTime?.nanos ?? 0) / 1e6);
  return events
    .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'fetchWeights')
    .flatMap((scheduled) => {
      const done = events.find((e) => Number(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? -1) === Number(scheduled.eventId));
      return done ? [[time(scheduled), time(done)] as Interval] : [];
    });
}

function union(intervals: Interval[]): Interval[] {
  const sorted = [...intervals].sort((a, b) => a[0] - b[0]);
  const out: Interval[] = [];
  for (const [s, e] of sorted) {
    const last = out[out.length - 1];
    if (last && s <= last[1]) last[1] = Math.max(last[1], e);
    else out.push([s, e]);
  }
  return out;
}

function overlap(a: Interval[], b: Interval[]): number {
  let total = 0;
  for (const [s1, e1] of union(a)) for (const [s2, e2] of union(b)) total += Math.max(0, Math.min(e1, e2) - Math.max(s1, s2));
  return total;
}

const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

async function rollOnce(
  stack: Awaited<ReturnType<typeof startStack>>,
  moveMain: () => string,
  prefetch: boolean,
): Promise<{ line: string }> {
  const { client } = stack;
  const name = `rollw-${prefetch ? 'ahead' : 'plain'}-${Date.now().toString(36)}`;
  const handle = client.workflow.getHandle(`deployment/${name}`);
  await client.workflow.start('deployModel', {
    workflowId: handle.workflowId,
    taskQueue: 'llmgw',
    args: [{ model: 'rollweights', name, profile: 'w8', replicas: HOSTS, maxSurge: 0, maxUnavailable: 1 }],
  });
  for (const started = Date.now(); ;) {
    const view = await handle.query(deploymentStatusQuery).catch(() => undefined);
    if (view?.phase === 'Ready' && view.ready === HOSTS) break;
    if (Date.now() - started > 300_000) throw new Error(`${name}: not Ready in 300 s`);
    await new Promise((r) => setTimeout(r, 200));
  }
  const before = new Set((await handle.query(deploymentStatusQuery)).replicas.map((r) => r.replicaId));
  const commit = moveMain();
  const below: Interval[] = [];
  let belowSince: number | undefined;
  const started = Date.now();
  await handle.executeUpdate(rolloutUpdate, { args: [{ refreshSource: true, ...(prefetch ? {} : { prefetch: false }) }] });
  for (;;) {
    const view = await handle.query(deploymentStatusQuery);
    const routable = view.replicas.filter((r) => r.phase === 'Ready').length;
    if (routable < HOSTS) belowSince ??= Date.now();
    else if (belowSince !== undefined) {
      below.push([belowSince, Date.now()]);
      belowSince = undefined;
    }
    const state = view.rollout?.state;
    if (state === 'Complete' || state === 'RolledBack' || state === 'Failed') {
      if (state !== 'Complete') console.log(`  ${name}: ${state}: ${view.rollout!.reason}`);
      if (!view.modelSource?.endsWith(commit)) console.log(`  ${name}: runs ${view.modelSource}, not the new commit`);
      break;
    }
    if (Date.now() - started > 600_000) throw new Error(`${name}: rollout not done in 600 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  if (belowSince !== undefined) below.push([belowSince, Date.now()]);
  const total = Date.now() - started;
  const view = await handle.query(deploymentStatusQuery);
  const added = view.replicas.filter((r) => !before.has(r.replicaId)).map((r) => r.replicaId);
  const ahead = await fetchIntervals(client, handle.workflowId);
  const own = (await Promise.all(added.map((id) => fetchIntervals(client, id)))).flat();
  const fetches = [...ahead, ...own];
  const fetchMs = union(fetches).reduce((sum, [s, e]) => sum + e - s, 0);
  const longest = Math.max(0, ...below.map(([s, e]) => e - s));
  await stack.llmgw(['undeploy', name]);
  return {
    line: `${prefetch ? 'fetched ahead  ' : 'no prefetch    '} rollout ${seconds(total)} · longest with < ${HOSTS} routable ${seconds(longest)} (${seconds(below.reduce((s, [a, b]) => s + b - a, 0))} in all) · fetch ${seconds(fetchMs)} (ahead ${seconds(union(ahead).reduce((s, [a, b]) => s + b - a, 0))}) · fetch inside < ${HOSTS} routable ${seconds(overlap(fetches, below))}`,
  };
}

export async function rolloutWithWeights(): Promise<void> {
  const hub = await startStandInHub();
  hub.addRepo({ repo: REPO, files: FILES });
  const stack = await startStack({
    hosts: HOSTS,
    router: true,
    catalog: catalogFile(),
    env: { HF_ENDPOINT: hub.url },
    agentArgs: (i) => ['--weights-dir', mkdtempSync(join(tmpdir(), `llmgw-bench-rollw-${i}-`))],
  });
  try {
    const total = FILES.reduce((s, f) => s + f.size, 0);
    console.log(
      `rollout with weights to fetch: ${HOSTS} replicas of 8 GPUs on ${HOSTS} simulated 8×H100 hosts (drain-first, maxUnavailable 1), ${(total / MB).toFixed(0)} MB per revision from the stand-in hub at ${(BANDWIDTH / MB).toFixed(0)} MB/s shared, each rollout to a new commit of every shard (--refresh-source)`,
    );
    hub.setBandwidth(BANDWIDTH);
    const paths = SHARDS.map((f) => f.path);
    for (const prefetch of [false, true]) console.log(`  ${(await rollOnce(stack, () => hub.moveMain(REPO, paths), prefetch)).line}`);
  } finally {
    await stack.stop();
    await hub.close();
  }
}
