// npm run bench:faults — network faults under router load, on four hosts that are network
// namespaces (bench/net-stack.ts; root only): a whole host cut off and back, its agent cut from
// Temporal while the router still reaches it, the router cut from it, and a deploy of 8
// replicas with 200 ms latency each way and 5 % of connections reset between the agents and
// Temporal, beside the same deploy clean. Prints one table: time to detect, time to recover,
// requests failed, stale engines stopped by fencing, GPUs held twice. Figures, not asserts.
import Table from 'cli-table3';
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery, describeNodeQuery } from '../workflows/definitions.js';
import type { DeploymentView } from '../common/replica-types.js';
import { listPids, readEnviron } from '../agent/supervisor/proc.js';
import { networkUnavailable } from '../test/helpers/netns/network.js';
import { cutFromControlPlane, cutFromRouter, cutHost, healCuts, restoreHost } from '../test/helpers/netns/faults.js';
import { gpusHeldTwice } from '../test/helpers/netns/gpu-holders.js';
import { startLoad, type Sample } from '../test/helpers/load.js';
import { startNetStack, type NetStack } from './net-stack.js';

const LOST_GRACE_SECONDS = 20;
const DEPLOYMENT = 'faults';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const secs = (ms: number | undefined): string => (ms === undefined ? '—' : `${(ms / 1000).toFixed(1)} s`);

interface Row {
  fault: string;
  detectMs?: number;
  recoverMs?: number;
  recovered: string;
  failed: string;
  fenced: string;
  twice: number;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number, onTick?: () => void): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    onTick?.();
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    await sleep(250);
  }
  throw new Error(`bench:faults: no ${what} within ${timeoutMs / 1000} s`);
}

const status = (client: Client, name = DEPLOYMENT): Promise<DeploymentView> =>
  client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
const readyCount = async (client: Client, name = DEPLOYMENT): Promise<number> =>
  (await status(client, name)).replicas.filter((r) => r.phase === 'Ready').length;
const nodePhase = async (client: Client, nodeId: string): Promise<string> =>
  (await client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery)).phase;
const enginesOn = (nodeId: string): string[] =>
  listPids()
    .map((pid) => readEnviron(pid))
    .filter((env) => env?.LLMGW_NODE_ID === nodeId && env.LLMGW_SHARD_ID)
    .map((env) => env!.LLMGW_SHARD_ID!);
const failedOf = (samples: Sample[]): string => `${samples.filter((s) => !s.ok).length} of ${samples.length}`;

async function withLoad<T>(
  stack: NetStack,
  body: (twice: () => void) => Promise<T>,
): Promise<{ result: T; samples: Sample[]; twice: number }> {
  const load = startLoad({
    routerUrl: stack.routerUrl,
    model: DEPLOYMENT,
    plainClients: 4,
    streamClients: 2,
    streamTokens: 20,
    timeoutMs: 10_000,
  });
  let twice = 0;
  const check = (): void => {
    twice = Math.max(twice, gpusHeldTwice(stack.nodeIds).length);
  };
  await sleep(2_000);
  const result = await body(check);
  await sleep(2_000);
  return { result, samples: await load.stop(), twice };
}

async function hostCut(stack: NetStack): Promise<Row> {
  const before = await status(stack.client);
  const victim = stack.hosts.find((h) => h.nodeId === before.replicas[0]!.nodes[0])!;
  const staleShards = before.replicas
    .flatMap((r) => r.shards)
    .filter((s) => s.nodeId === victim.nodeId)
    .map((s) => s.shardId);
  const moved = before.replicas.filter((r) => r.nodes.includes(victim.nodeId)).map((r) => r.replicaId);
  const { result, samples, twice } = await withLoad(stack, async (check) => {
    const cutAt = Date.now();
    cutHost(victim.host);
    const detect = await until(
      'Unknown',
      async () => ((await status(stack.client)).replicas.some((r) => r.phase === 'Unknown') ? Date.now() - cutAt : undefined),
      60_000,
      check,
    );
    const recover = await until(
      'Ready elsewhere',
      async () => {
        const view = await status(stack.client);
        const done = moved.every((id) =>
          view.replicas.some((r) => r.replicaId === id && r.phase === 'Ready' && !r.nodes.includes(victim.nodeId)),
        );
        return done ? Date.now() - cutAt : undefined;
      },
      120_000,
      check,
    );
    const backAt = Date.now();
    restoreHost(victim.host);
    const fenced = await until(
      'stale engines stopped',
      async () => (staleShards.some((s) => enginesOn(victim.nodeId).includes(s)) ? undefined : Date.now() - backAt),
      90_000,
      check,
    );
    return { detect, recover, fenced };
  });
  return {
    fault: `host cut off (link down), ${moved.length} replica(s) on it`,
    detectMs: result.detect,
    recoverMs: result.recover,
    recovered: 'Ready elsewhere',
    failed: failedOf(samples),
    fenced: `${staleShards.length}, ${secs(result.fenced)} after return`,
    twice,
  };
}

async function controlPlaneCut(stack: NetStack): Promise<Row> {
  const view = await status(stack.client);
  const host = stack.hosts.find((h) => h.nodeId === view.replicas.find((r) => r.phase === 'Ready')!.nodes[0])!;
  const { result, samples, twice } = await withLoad(stack, async (check) => {
    const cutAt = Date.now();
    cutFromControlPlane(stack.network, host.host);
    const detect = await until(
      'NotReady',
      async () => ((await nodePhase(stack.client, host.nodeId)) === 'NotReady' ? Date.now() - cutAt : undefined),
      60_000,
      check,
    );
    await sleep(5_000);
    const healAt = Date.now();
    healCuts(stack.network, host.host);
    const recover = await until(
      'Ready again',
      async () => ((await nodePhase(stack.client, host.nodeId)) === 'Ready' ? Date.now() - healAt : undefined),
      60_000,
      check,
    );
    return { detect, recover };
  });
  return {
    fault: 'agent ↔ Temporal cut, router ↔ engines up',
    detectMs: result.detect,
    recoverMs: result.recover,
    recovered: 'node Ready after heal',
    failed: failedOf(samples),
    fenced: '0 (none moved)',
    twice,
  };
}

async function routerCut(stack: NetStack): Promise<Row> {
  const view = await status(stack.client);
  const host = stack.hosts.find((h) => h.nodeId === view.replicas.find((r) => r.phase === 'Ready')!.nodes[0])!;
  let cutAt = 0;
  const { samples, twice } = await withLoad(stack, async (check) => {
    cutAt = Date.now();
    cutFromRouter(stack.network, host.host);
    for (let i = 0; i < 40; i++) {
      check();
      await sleep(250);
    }
    healCuts(stack.network, host.host);
  });
  const failed = samples.filter((s) => !s.ok);
  const lastFailedSent = failed.length ? Math.max(...failed.map((s) => s.start)) - cutAt : undefined;
  return {
    fault: 'router cut from one host (10 s)',
    recoverMs: lastFailedSent,
    recovered: 'last failed request sent (after cut)',
    failed: failedOf(samples),
    fenced: '0',
    twice,
  };
}

async function deployTime(stack: NetStack, label: string): Promise<{ ms: number; failed: number }> {
  const name = `lat-${label}-${Date.now().toString(36)}`;
  const started = Date.now();
  if ((await stack.llmgw(['deploy', 'bench', '--name', name, '--replicas', '8', '--profile', 'instant'])) !== 0)
    throw new Error(`deploy ${name} failed`);
  const ms = await until(
    '8 replicas Ready',
    async () => ((await readyCount(stack.client, name)) === 8 ? Date.now() - started : undefined),
    300_000,
  );
  const failed = (await status(stack.client, name)).replicas.filter((r) => r.phase === 'Failed').length;
  await stack.llmgw(['undeploy', name]);
  await until('undeployed', async () => ((await readyCount(stack.client, name).catch(() => 0)) === 0 ? true : undefined), 120_000);
  return { ms, failed };
}

async function latency(stack: NetStack): Promise<Row[]> {
  const clean = await deployTime(stack, 'clean');
  await stack.toxiproxy.addToxics([
    { type: 'latency', stream: 'upstream', attributes: { latency: 200, jitter: 20 } },
    { type: 'latency', stream: 'downstream', attributes: { latency: 200, jitter: 20 } },
    { type: 'reset_peer', stream: 'upstream', toxicity: 0.05, attributes: { timeout: 2_000 } },
  ]);
  const slow = await deployTime(stack, 'slow').finally(() => stack.toxiproxy.clearToxics());
  return [
    {
      fault: 'deploy 8 replicas, clean',
      recoverMs: clean.ms,
      recovered: 'all Ready',
      failed: `${clean.failed} replicas Failed`,
      fenced: '—',
      twice: 0,
    },
    {
      fault: 'deploy 8, 200 ms each way + 5 % conns reset',
      recoverMs: slow.ms,
      recovered: `all Ready (${(slow.ms / clean.ms).toFixed(2)}× clean)`,
      failed: `${slow.failed} replicas Failed`,
      fenced: '—',
      twice: 0,
    },
  ];
}

async function main(): Promise<void> {
  const unavailable = networkUnavailable();
  if (unavailable) {
    console.log(`bench:faults needs network namespaces: ${unavailable}`);
    return;
  }
  const stack = await startNetStack({ hosts: 4, lostGraceSeconds: LOST_GRACE_SECONDS });
  const rows: Row[] = [];
  try {
    if ((await stack.llmgw(['deploy', 'bench', '--name', DEPLOYMENT, '--replicas', '4', '--profile', 'instant'])) !== 0)
      throw new Error('deploy failed');
    await until('4 replicas Ready', async () => ((await readyCount(stack.client)) === 4 ? true : undefined), 120_000);
    rows.push(await controlPlaneCut(stack));
    rows.push(await routerCut(stack));
    rows.push(await hostCut(stack));
    await until('4 replicas Ready', async () => ((await readyCount(stack.client)) === 4 ? true : undefined), 120_000);
    await stack.llmgw(['undeploy', DEPLOYMENT]);
    rows.push(...(await latency(stack)));
  } finally {
    await stack.stop();
  }
  const table = new Table({
    style: { head: [], border: [] },
    head: ['fault', 'detect', 'recover', 'recovered =', 'requests failed', 'stale engines fenced', 'GPUs held twice'],
  });
  for (const r of rows) table.push([r.fault, secs(r.detectMs), secs(r.recoverMs), r.recovered, r.failed, r.fenced, String(r.twice)]);
  console.log(`bench:faults — 4 namespaced hosts (8 GPUs each), lost grace ${LOST_GRACE_SECONDS} s, load: 4 plain + 2 streaming clients`);
  console.log(table.toString());
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
