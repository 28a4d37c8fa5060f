// Replica lifecycles end to end: deployModel, replica and node workflows on a real dev
// server, a real control worker, real simulated agents and real fake engines, driven
// through the `llmgw` CLI and the Temporal CLI exactly as an operator would.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery, describeNodeQuery } from '../../workflows/definitions.js';
import type { DeploymentView, ReplicaView } from '../../common/replica-types.js';
import type { NodeView } from '../../common/node-types.js';
import { enginesOf, eventually, INVENTORIES, killEnginesOf, runLlmgw, sleep, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';
import { recordHistory } from '../helpers/histories.js';
import { temporalStartDeployment } from '../helpers/temporal-cli.js';

const LIFE = join(INVENTORIES, 'lifex8.yaml');
const fleet = useIsolatedFleet({
  gpuClass: 'LIFE',
  // Isolation between tests: whatever a test left running on the LIFE class is named
  // (so a leak is visible) and terminated before the next test brings new hosts.
  afterIsolation: (leftovers, context) => {
    if (leftovers.length) console.log(`after "${context.task.name}": terminated ${leftovers.join(', ')}`);
  },
});
let client: Client;

async function twoHosts(extra: string[] = []): Promise<[string, string]> {
  const a = uniqueId('life-a');
  const b = uniqueId('life-b');
  await Promise.all([fleet.agent(a, { inventory: LIFE, extra }), fleet.agent(b, { inventory: LIFE, extra })]);
  return [a, b];
}

function status(name: string): Promise<DeploymentView> {
  return client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
}

function node(nodeId: string): Promise<NodeView> {
  return client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);
}

async function freeGpus(ids: string[]): Promise<number> {
  let free = 0;
  for (const id of ids) free += (await node(id)).freeGpus.length;
  return free;
}

function cudaDevicesOf(ids: string[]): Map<number, string> {
  const found = new Map<number, string>();
  for (const engine of enginesOf(ids)) found.set(engine.pid, `${engine.env.LLMGW_NODE_ID}:${engine.env.CUDA_VISIBLE_DEVICES}`);
  return found;
}

beforeAll(async () => {
  client = fleet.client;
});

describe('replica lifecycles', () => {
  it('deploys with `llmgw deploy --wait`, scales down leaving one engine and freeing GPUs, and undeploys to no engine and every GPU free', async () => {
    const hosts = await twoHosts();
    const name = uniqueId('life-demo');
    const deployed = await runLlmgw(['deploy', 'life', '--name', name, '--replicas', '3', '--wait', '--timeout', '60']);
    expect(deployed.code, deployed.output).toBe(0);
    // Each replica's progress is printed as it changes; which phases a 500 ms poll catches
    // depends on the machine's load (all three replicas may be Ready at the first look).
    expect(deployed.output).toMatch(new RegExp(`${name}: Ready — 3/3 Ready`));
    expect(enginesOf(hosts)).toHaveLength(3);
    // Spread: three one-GPU replicas on two hosts use both.
    const view = await status(name);
    expect(new Set(view.replicas.flatMap((r) => r.nodes)).size).toBe(2);

    const scaled = await runLlmgw(['scale', name, '1']);
    expect(scaled.code, scaled.output).toBe(0);
    await eventually('one engine left', () => enginesOf(hosts).length === 1, 30_000);
    await eventually('15 GPUs free', async () => (await freeGpus(hosts)) === 15, 15_000);

    const undeployed = await runLlmgw(['undeploy', name]);
    expect(undeployed.code, undeployed.output).toBe(0);
    expect(enginesOf(hosts)).toHaveLength(0);
    expect(await freeGpus(hosts)).toBe(16);
    recordHistory(`deployment/${name}`, 'deployModel-deploy-scale-undeploy');
    recordHistory(`replica/${name}/1`, 'replica-ready-then-drained');
  });

  it('behaves the same when started with the Temporal CLI and plain JSON', async () => {
    const hosts = await twoHosts();
    const name = uniqueId('life-json');
    temporalStartDeployment(name, JSON.stringify({ model: 'life', replicas: 2 }));
    const ready = await eventually(
      'Ready',
      async () => {
        const view = await status(name);
        return view.phase === 'Ready' ? view : undefined;
      },
      30_000,
    );
    expect(ready.replicas.map((r) => r.phase)).toEqual(['Ready', 'Ready']);
    expect(enginesOf(hosts)).toHaveLength(2);
    const described = await client.workflow.getHandle(`deployment/${name}`).describe();
    expect(described.searchAttributes.LlmgwDeployment).toEqual([name]);
    expect(described.searchAttributes.LlmgwState).toEqual(['Ready']);
    const cliStatus = await runLlmgw(['status', name]);
    expect(cliStatus.output).toMatch(/Ready — 2\/2 Ready/);
    expect((await runLlmgw(['undeploy', name])).code).toBe(0);
    expect(enginesOf(hosts)).toHaveLength(0);
  });

  it('keeps surplus demand Unschedulable with its reason, and wakes it to Ready when capacity is freed', async () => {
    await twoHosts();
    const big = uniqueId('life-big');
    const small = uniqueId('life-small');
    expect(
      (await runLlmgw(['deploy', 'life', '--name', big, '--profile', 'tp2', '--replicas', '6', '--wait', '--timeout', '60'])).code,
    ).toBe(0);
    await runLlmgw(['deploy', 'life', '--name', small, '--profile', 'tp2', '--replicas', '4']);
    // A reserve that lost a race says "the capacity index was a moment stale" for a second or
    // two before the replica settles on the reason an operator should read.
    const waiting = await eventually(
      'two Unschedulable, saying why',
      async () => {
        const view = await status(small);
        const stuck = view.replicas.filter((r) => r.phase === 'Unschedulable' && /needs 2 GPUs, 0 free/.test(r.reason ?? ''));
        return view.replicas.filter((r) => r.phase === 'Ready').length === 2 && stuck.length === 2 ? stuck : undefined;
      },
      40_000,
    );
    const cli = await runLlmgw(['status', small]);
    expect(cli.output).toMatch(/Unschedulable/);
    const described = await client.workflow.getHandle(waiting[0]!.replicaId).describe();
    expect(described.searchAttributes.LlmgwState).toEqual(['Unschedulable']);

    await runLlmgw(['scale', big, '4']);
    // Capacity is freed when the drained replicas release their GPUs.
    await eventually('GPUs freed', async () => (await status(big)).replicas.filter((r) => r.phase === 'Stopped').length === 2, 30_000, 100);
    const freedAt = Date.now();
    // Woken by the release, not by its 10-minute re-check: Ready well within a minute.
    await eventually('the surplus Ready', async () => (await status(small)).phase === 'Ready', 60_000, 100).catch(
      async (error: unknown) => {
        console.log(JSON.stringify((await status(small)).replicas.map((r) => [r.replicaId, r.phase, r.reason])));
        throw error;
      },
    );
    const latency = Date.now() - freedAt;
    console.log(`Unschedulable → Ready ${latency} ms after capacity was freed`);
    // Ready within the minute above is what must hold: the release's capacityChanged wakes a
    // waiter, unless one of its early looks (2, 10 and 30 s after it turned Unschedulable:
    // workflows/replica/place.ts) found the freed GPUs first, which sends no signal.
    let signalled = 0;
    for (const { replicaId } of waiting) {
      const events = (await client.workflow.getHandle(replicaId).fetchHistory()).events ?? [];
      if (events.some((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'capacityChanged')) signalled++;
    }
    console.log(`${signalled} of ${waiting.length} waiters woken by capacityChanged, the rest by an early look`);
    await Promise.all([runLlmgw(['undeploy', big]), runLlmgw(['undeploy', small])]);
    recordHistory(waiting[0]!.replicaId, 'replica-unschedulable-then-ready');
  });

  it('never gives one GPU to two engines while ten deployments start at once on two hosts', async () => {
    const hosts = await twoHosts();
    const names = Array.from({ length: 10 }, (_, i) => uniqueId(`life-ten-${i}`));
    let sampling = true;
    let samples = 0;
    const conflicts: string[] = [];
    const sampler = (async () => {
      while (sampling) {
        const seen = new Map<string, number>();
        for (const [pid, devices] of cudaDevicesOf(hosts)) {
          const [nodeId, list] = devices.split(':');
          for (const gpu of (list ?? '').split(',').filter(Boolean)) {
            const key = `${nodeId}:${gpu}`;
            if (seen.has(key)) conflicts.push(`GPU ${key} in pids ${seen.get(key)} and ${pid}`);
            seen.set(key, pid);
          }
        }
        samples++;
        await sleep(50);
      }
    })();
    const results = await Promise.all(
      names.map((name) => runLlmgw(['deploy', 'life', '--name', name, '--replicas', '1', '--wait', '--timeout', '90'])),
    );
    sampling = false;
    await sampler;
    expect(results.map((r) => r.code)).toEqual(Array(10).fill(0));
    expect(enginesOf(hosts)).toHaveLength(10);
    console.log(`sampled /proc/*/environ ${samples} times during ten concurrent deploys: ${conflicts.length} conflicts`);
    expect(conflicts).toEqual([]);
    await Promise.all(names.map((name) => runLlmgw(['undeploy', name])));
    expect(await freeGpus(hosts)).toBe(16);
  });

  it('brings a Ready replica back with a new engine within 15 s of kill -9', async () => {
    const hosts = await twoHosts();
    const name = uniqueId('life-kill');
    expect((await runLlmgw(['deploy', 'life', '--name', name, '--replicas', '1', '--wait'])).code).toBe(0);
    const before = (await status(name)).replicas[0]!;
    const pid = before.shards[0]!.pid;
    process.kill(pid, 'SIGKILL');
    const killedAt = Date.now();
    const after = await eventually(
      'Ready with a new engine',
      async () => {
        const r = (await status(name)).replicas[0];
        return r && r.phase === 'Ready' && r.shards[0]!.pid !== pid ? r : undefined;
      },
      20_000,
      100,
    );
    const took = Date.now() - killedAt;
    console.log(`engine kill -9 → Ready again with pid ${after.shards[0]!.pid} in ${took} ms`);
    expect(took).toBeLessThan(15_000);
    expect(enginesOf(hosts).map((e) => e.pid)).toEqual([after.shards[0]!.pid]);
    await runLlmgw(['undeploy', name]);
  });

  it('backs off restarts of an engine that crashes one second after start, re-places it on the other host, then fails it with the reason; the deployment replaces it without a hot loop', async () => {
    const hosts = await twoHosts();
    const name = uniqueId('crashy');
    await runLlmgw(['deploy', 'crashy', '--name', name, '--replicas', '1']);
    const timeline: { at: number; phase: string; reason: string; nodes: string[] }[] = [];
    const started = Date.now();
    let failed: ReplicaView | undefined;
    while (!failed && Date.now() - started < 90_000) {
      const view = await status(name).catch(() => undefined);
      const first = view?.replicas.find((r) => r.seq === 1);
      if (first && (timeline.length === 0 || timeline[timeline.length - 1]!.reason !== first.reason))
        timeline.push({ at: Date.now() - started, phase: first.phase, reason: first.reason, nodes: first.nodes });
      if (first?.phase === 'Failed') failed = first;
      await sleep(100);
    }
    for (const t of timeline) console.log(`+${(t.at / 1000).toFixed(1)} s ${t.phase} [${t.nodes.join(',')}] ${t.reason}`);
    expect(failed, 'replica 1 ends Failed').toBeDefined();
    expect(failed!.reason).toMatch(/gave up after 2 placements/);
    const restarts = timeline.filter((t) => /restarting on the same GPUs/.test(t.reason));
    expect(restarts.map((t) => /in (\d+) s/.exec(t.reason)?.[1])).toEqual(expect.arrayContaining(['2', '4']));
    const usedNodes = new Set(timeline.flatMap((t) => t.nodes));
    expect([...usedNodes].sort()).toEqual([...hosts].sort());
    // The deployment replaces it, and a second failure is replaced only after a delay.
    await eventually('a replacement', async () => (await status(name)).replicas.some((r) => r.seq === 2), 10_000);
    await sleep(5_000);
    expect((await status(name)).replicas.filter((r) => r.seq > 2).length).toBeLessThanOrEqual(1);
    expect((await runLlmgw(['undeploy', name])).code).toBe(0);
    recordHistory(failed!.replicaId, 'replica-crash-backoff-replace-failed');
  });

  it('marks replicas Unknown when their agent dies, re-places them on the other host after the grace, and releases the dead host’s GPUs once it is Lost', async () => {
    const [a, b] = await twoHosts(['--lost-grace-seconds', '8']);
    const name = uniqueId('life-lost');
    expect((await runLlmgw(['deploy', 'life', '--name', name, '--replicas', '2', '--wait'])).code).toBe(0);
    const onA = (await status(name)).replicas.filter((r) => r.nodes.includes(a));
    expect(onA.length).toBeGreaterThan(0);
    const agentA = fleet.agentOf(a);
    await agentA.kill9();
    await eventually('Unknown', async () => (await status(name)).replicas.some((r) => r.phase === 'Unknown'), 15_000);
    await eventually('node Lost', async () => (await node(a)).phase === 'Lost', 30_000);
    expect((await node(a)).allocations).toEqual([]);
    const settled = await eventually(
      'all Ready on b',
      async () => {
        const view = await status(name);
        return view.phase === 'Ready' && view.replicas.filter((r) => r.phase === 'Ready').every((r) => r.nodes.every((n) => n === b))
          ? view
          : undefined;
      },
      40_000,
    );
    expect(settled.ready).toBe(2);
    await runLlmgw(['undeploy', name]);
    await killEnginesOf([a]);
  });

  it('rejects bad input with a clear CLI error (exit 1) and a failed workflow naming the problem, holding nothing', async () => {
    const hosts = await twoHosts();
    const cases: { args: string[]; message: RegExp; workflow?: string }[] = [
      {
        args: ['deploy', 'no-such-model', '--name', uniqueId('bad-model')],
        message: /unknown model "no-such-model".*valid models?: .*life/i,
      },
      { args: ['deploy', 'life', '--name', uniqueId('bad-profile'), '--profile', 'nope'], message: /unknown profile "nope".*one-gpu/i },
      { args: ['deploy', 'life', '--name', uniqueId('bad-neg'), '--replicas', '-1'], message: /replicas must be ≥ 0/ },
      {
        args: ['deploy', 'life', '--name', uniqueId('bad-big'), '--replicas', '10000'],
        message: /replicas 10000 is over the maximum of 64/,
      },
      {
        args: ['deploy', 'life', '--name', uniqueId('bad-class'), '--profile', 'future'],
        message: /needs B200 GPUs and no registered node has them/,
      },
    ];
    for (const c of cases) {
      const result = await runLlmgw(c.args);
      expect(result.code, result.output).toBe(1);
      expect(result.output).toMatch(c.message);
    }
    // The workflow fails with the same message (replicas -1 never reached Temporal: the CLI checks first).
    const failedName = cases[0]!.args[3]!;
    const described = await client.workflow.getHandle(`deployment/${failedName}`).describe();
    expect(described.status.name).toBe('FAILED');
    // Malformed JSON never starts a workflow; well-formed JSON of the wrong shape fails it.
    const malformed = (() => {
      try {
        execFileSync(
          inject('temporalBin'),
          [
            'workflow',
            'start',
            '--type',
            'deployModel',
            '--task-queue',
            'llmgw',
            '--workflow-id',
            `deployment/${uniqueId('bad-json')}`,
            '--input',
            '{"model": "life", replicas: 2',
            '--address',
            inject('temporalAddress'),
          ],
          { stdio: 'pipe' },
        );
        return '';
      } catch (error) {
        return String((error as { stderr?: Buffer }).stderr ?? error);
      }
    })();
    expect(malformed).toMatch(/invalid|json|unmarshal/i);
    const wrongShape = uniqueId('bad-shape');
    temporalStartDeployment(wrongShape, '{"model":"life","replicas":"two"}');
    const failure = await client.workflow
      .getHandle(`deployment/${wrongShape}`)
      .result()
      .catch((error: unknown) => error as Error);
    expect(String((failure as { cause?: Error }).cause?.message)).toMatch(/replicas: replicas must be a number/);
    expect(enginesOf(hosts)).toHaveLength(0);
    expect(await freeGpus(hosts)).toBe(16);
  });
});
