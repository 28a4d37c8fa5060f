// npm run bench:faults — network faults under router load, on four hosts that are network
// namespaces (bench/net-stack.ts; root only), with llmgw's default timings: a whole host cut
// off and back, its agent cut from Temporal while the router still reaches it, the router cut
// from it, every agent cut from Temporal at once (the control plane's own switch), and a deploy
// of 8 replicas clean and with 200 ms latency each way and 5 % of connections reset or dropped
// between the agents and Temporal (new ones as they open; open ones in 1 s windows), measured
// in the same run, alternating, three times each, with engines that start at once and with
// engines that load for 20 s (bench/faults-deploy.ts). Prints one table: time to detect, time to
// recover, requests failed, stale engines stopped by fencing, GPUs held twice. Figures, not asserts.
import Table from 'cli-table3';
import type { DeploymentView } from '../common/replica-types.js';
import { DEFAULT_LOST_GRACE_SECONDS } from '../common/node-types.js';
import { listPids, readEnviron } from '../agent/supervisor/processes/proc.js';
import { networkUnavailable } from '../test/helpers/netns/network.js';
import { cutFromControlPlane, cutFromRouter, cutHost, healCuts, restoreHost } from '../test/helpers/netns/faults.js';
import { gpusHeldTwice } from '../test/helpers/netns/gpu-holders.js';
import { startLoad, type Sample } from '../test/helpers/load.js';
import { startNetStack, type NetStack } from './net-stack.js';
import { DEPLOYMENT, msUntil, nodePhase, readyCount, secs, sleep, status, until, type Row } from './faults-common.js';
import { deployRows } from './faults-deploy.js';

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
    const unknown = async () => (await status(stack.client)).replicas.some((r) => r.phase === 'Unknown');
    const detect = await msUntil('Unknown', cutAt, unknown, 60_000, check);
    const recover = await msUntil(
      'Ready elsewhere',
      cutAt,
      async () => {
        const view = await status(stack.client);
        return moved.every((id) =>
          view.replicas.some((r) => r.replicaId === id && r.phase === 'Ready' && !r.nodes.includes(victim.nodeId)),
        );
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
    const ready = await until(
      'node Ready again',
      async () => ((await nodePhase(stack.client, victim.nodeId)) === 'Ready' ? true : undefined),
      90_000,
    );
    return { detect, recover, fenced, ready };
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
    const phaseIs = (phase: string) => async () => (await nodePhase(stack.client, host.nodeId)) === phase;
    const detect = await msUntil('NotReady', cutAt, phaseIs('NotReady'), 60_000, check);
    await sleep(5_000);
    const healAt = Date.now();
    healCuts(stack.network, host.host);
    const recover = await msUntil('Ready again', healAt, phaseIs('Ready'), 60_000, check);
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

const everyNodeIs = async (stack: NetStack, phase: string): Promise<boolean> =>
  (await Promise.all(stack.nodeIds.map((id) => nodePhase(stack.client, id)))).every((p) => p === phase);

/** Every agent cut from Temporal for longer than silence + grace: nothing may be declared Lost. */
async function everyAgentCut(stack: NetStack): Promise<Row> {
  const before = await status(stack.client);
  const engines = (view: DeploymentView): string =>
    view.replicas
      .flatMap((r) => r.shards.map((s) => `${s.shardId}@${s.pid}`))
      .sort()
      .join(',');
  const { result, samples, twice } = await withLoad(stack, async (check) => {
    const cutAt = Date.now();
    for (const h of stack.hosts) cutFromControlPlane(stack.network, h.host);
    const detect = await msUntil('every node NotReady', cutAt, () => everyNodeIs(stack, 'NotReady'), 60_000, check);
    let lost = 0;
    while (Date.now() < cutAt + 10_000 + DEFAULT_LOST_GRACE_SECONDS * 1000 + 15_000) {
      check();
      const phases = await Promise.all(stack.nodeIds.map((id) => nodePhase(stack.client, id)));
      lost = Math.max(lost, phases.filter((p) => p === 'Lost').length);
      await sleep(1_000);
    }
    const cutFor = Date.now() - cutAt;
    const healAt = Date.now();
    for (const h of stack.hosts) healCuts(stack.network, h.host);
    const recover = await msUntil('every node Ready', healAt, () => everyNodeIs(stack, 'Ready'), 90_000, check);
    const after = await until(
      'every replica Ready',
      async () => {
        const view = await status(stack.client);
        return view.replicas.every((r) => r.phase === 'Ready') ? view : undefined;
      },
      60_000,
    );
    return { detect, recover, lost, cutFor, moved: engines(after) !== engines(before) };
  });
  return {
    fault: `every agent ↔ Temporal cut for ${secs(result.cutFor)}, router ↔ engines up`,
    detectMs: result.detect,
    recoverMs: result.recover,
    recovered: `all Ready after heal; ${result.lost} declared Lost, ${result.moved ? 'replicas moved' : 'nothing moved'}`,
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

async function main(): Promise<void> {
  const unavailable = networkUnavailable();
  if (unavailable) {
    console.log(`bench:faults needs network namespaces: ${unavailable}`);
    return;
  }
  const stack = await startNetStack({ hosts: 4 });
  const rows: Row[] = [];
  try {
    if ((await stack.llmgw(['deploy', 'bench', '--name', DEPLOYMENT, '--replicas', '4', '--profile', 'instant'])) !== 0)
      throw new Error('deploy failed');
    await until('4 replicas Ready', async () => ((await readyCount(stack.client)) === 4 ? true : undefined), 120_000);
    rows.push(await controlPlaneCut(stack));
    rows.push(await routerCut(stack));
    rows.push(await hostCut(stack));
    await until('4 replicas Ready', async () => ((await readyCount(stack.client)) === 4 ? true : undefined), 120_000);
    rows.push(await everyAgentCut(stack));
    await stack.llmgw(['undeploy', DEPLOYMENT]);
    rows.push(...(await deployRows(stack, 'instant', 'engines start at once')));
    rows.push(...(await deployRows(stack, 'loads-20s', 'engines load for 20 s')));
  } finally {
    await stack.stop();
  }
  const table = new Table({
    style: { head: [], border: [] },
    head: ['fault', 'detect', 'recover', 'recovered =', 'requests failed', 'stale engines fenced', 'GPUs held twice'],
  });
  for (const r of rows) table.push([r.fault, secs(r.detectMs), secs(r.recoverMs), r.recovered, r.failed, r.fenced, String(r.twice)]);
  console.log(
    `bench:faults — 4 namespaced hosts (8 GPUs each), default timings (silent after 10 s, lost grace ${DEFAULT_LOST_GRACE_SECONDS} s), load: 4 plain + 2 streaming clients`,
  );
  console.log(table.toString());
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
