// Rolling updates end to end: a deployment moved to a profile with other args under router
// load with long streams (surge), on a full host (drain-first), to a profile whose engine fails
// (rollback), from the Temporal CLI; drains that wait for in-flight work; bad requests refused.
// Real dev server, control worker, router, simulated agents and fake engines.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Client } from '@temporalio/client';
import type { DeploymentView } from '../../common/replica-types.js';
import { readCmdline } from '../../agent/supervisor/processes/proc.js';
import { deploymentStatusQuery, rolloutUpdate, scaleUpdate, undeployUpdate } from '../../workflows/definitions.js';
import { recordHistory } from '../helpers/histories.js';
import { startLoad, summarise, type Load } from '../helpers/load.js';
import { enginesOf, eventually, INVENTORIES, runLlmgw, sleep, temporalAddress, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';
import { spawnTestRouter } from '../helpers/router-process.js';

const ROLL = join(INVENTORIES, 'rollx8.yaml');
const fleet = useIsolatedFleet({ gpuClass: 'ROLL', ownTemporal: 'rollout' });
let client: Client;
let routerUrl = '';
let load: Load | undefined;

async function host(): Promise<string> {
  const nodeId = uniqueId('roll');
  await fleet.agent(nodeId, { inventory: ROLL });
  return nodeId;
}

const status = (name: string): Promise<DeploymentView> => client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);

async function deployReady(profile: string, replicas: number): Promise<string> {
  const name = uniqueId('roll');
  const deployed = await runLlmgw([
    'deploy',
    'roll',
    '--name',
    name,
    '--profile',
    profile,
    '--replicas',
    String(replicas),
    '--wait',
    '--timeout',
    '90',
  ]);
  expect(deployed.code, deployed.output).toBe(0);
  // Routed: the router serves it before the load starts.
  await eventually('routed', async () => ((await fetch(`${routerUrl}/v1/models`)).ok ? true : undefined), 20_000);
  return name;
}

/** Engines of the ROLL hosts with their GPUs and argv, sampled while a rollout runs. */
function engines(): { pid: number; gpus: string; argv: string[] }[] {
  return enginesOf(fleet.nodeIds).flatMap((e) => {
    // An engine that exits between the listing and this read is simply not running any more.
    const argv = readCmdline(e.pid);
    return argv ? [{ pid: e.pid, gpus: `${e.env.LLMGW_NODE_ID}:${e.env.CUDA_VISIBLE_DEVICES}`, argv }] : [];
  });
}

/** Samples engines every 100 ms: the most running at once, and any GPU two engines held. */
function watchEngines(): { stop(): { most: number; doubleHeld: string[] } } {
  let most = 0;
  const doubleHeld: string[] = [];
  const timer = setInterval(() => {
    const seen = new Map<string, number>();
    const now = engines();
    // Ranks of one replica are one engine here (single-node profiles): count processes.
    most = Math.max(most, now.length);
    for (const e of now) {
      const [node, list] = e.gpus.split(':');
      for (const gpu of (list ?? '').split(',').filter(Boolean)) {
        const key = `${node}:${gpu}`;
        if (seen.has(key)) doubleHeld.push(`${key} by ${seen.get(key)} and ${e.pid}`);
        seen.set(key, e.pid);
      }
    }
  }, 100);
  return {
    stop() {
      clearInterval(timer);
      return { most, doubleHeld };
    },
  };
}

beforeAll(async () => {
  client = fleet.client;
  // --debug-headers: the load helper tells replicas apart by x-llmgw-endpoint.
  routerUrl = (await spawnTestRouter(['--debug-headers'])).url;
});

afterEach(async () => {
  await load?.stop();
  load = undefined;
});

describe('rolling updates', () => {
  it('rolls 3 replicas to new args under load with 20 s streams: no failed request, no cut stream, at most 4 running, no GPU held twice', async () => {
    await host();
    const name = await deployReady('v1', 3);
    load = startLoad({ routerUrl, model: 'roll', plainClients: 2, streamClients: 2, streamTokens: 100 });
    await sleep(3_000);
    const watch = watchEngines();
    const started = Date.now();
    const rolled = await runLlmgw(['rollout', name, '--profile', 'v2', '--wait', '--timeout', '300'], {}, 320_000);
    const seconds = (Date.now() - started) / 1000;
    const { most, doubleHeld } = watch.stop();
    const samples = await load.stop();
    load = undefined;
    console.log(`surge rollout in ${seconds.toFixed(1)} s; at most ${most} engines; ${summarise(samples)}\n${rolled.output}`);
    expect(rolled.code, rolled.output).toBe(0);
    expect(samples.filter((s) => !s.ok)).toEqual([]);
    expect(samples.some((s) => s.stream && s.end - s.start > 15_000)).toBe(true);
    expect(most).toBeLessThanOrEqual(4);
    expect(doubleHeld).toEqual([]);
    const after = engines();
    expect(after).toHaveLength(3);
    for (const e of after) expect(e.argv.join(' ')).toMatch(/--tokens-per-second 6/);
    const view = await status(name);
    expect(view.rollout?.state).toBe('Complete');
    expect(view.rollout?.mode).toBe('surge');
    recordHistory(`deployment/${name}`, 'deployModel-rollout-surge');
  }, 360_000);

  it('completes drain-first when no GPU is free, and says why in llmgw status', async () => {
    await host();
    const name = await deployReady('v1', 4);
    await client.workflow.getHandle(`deployment/${name}`).executeUpdate(rolloutUpdate, { args: [{ profile: 'v2' }] });
    const shown = await eventually(
      'drain-first shown',
      async () => {
        const out = await runLlmgw(['status', name]);
        return /drain-first/.test(out.output) ? out.output : undefined;
      },
      60_000,
      500,
    );
    console.log(shown);
    const done = await eventually(
      'the rollout complete',
      async () => ((await status(name)).rollout?.state === 'Complete' ? status(name) : undefined),
      180_000,
      500,
    );
    expect(done.rollout?.mode).toBe('drain-first');
    expect(done.rollout?.steps.join('\n')).toMatch(/no room for a surge replica/);
    for (const e of engines()) expect(e.argv.join(' ')).toMatch(/--tokens-per-second 6/);
    recordHistory(`deployment/${name}`, 'deployModel-rollout-drain-first');
  }, 240_000);

  it('rolls back on its own when the new revision crashes at start, and the old one serves throughout', async () => {
    await host();
    const name = await deployReady('v1', 2);
    const before = engines()
      .map((e) => e.pid)
      .sort();
    load = startLoad({ routerUrl, model: 'roll', plainClients: 3 });
    const rolled = await runLlmgw(['rollout', name, '--profile', 'broken', '--wait', '--timeout', '240'], {}, 260_000);
    const samples = await load.stop();
    load = undefined;
    console.log(`rollback: ${summarise(samples)}\n${rolled.output}`);
    expect(rolled.code).not.toBe(0);
    expect(rolled.output).toMatch(/RolledBack/);
    const view = await status(name);
    expect(view.rollout?.state).toBe('RolledBack');
    expect(view.rollout?.steps.join('\n')).toMatch(/fail/i);
    expect(view.reason).toMatch(/fail/i);
    expect(samples.filter((s) => !s.ok)).toEqual([]);
    expect(
      engines()
        .map((e) => e.pid)
        .sort(),
    ).toEqual(before);
    recordHistory(`deployment/${name}`, 'deployModel-rollout-rollback');
  }, 300_000);

  it('completes a rollout started with `temporal workflow update execute --name rollout`', async () => {
    await host();
    const name = await deployReady('v1', 1);
    execFileSync(
      inject('temporalBin'),
      [
        'workflow',
        'update',
        'execute',
        '--workflow-id',
        `deployment/${name}`,
        '--name',
        'rollout',
        '--input',
        '{"profile":"v2"}',
        '--address',
        temporalAddress(),
      ],
      { stdio: 'pipe' },
    );
    await eventually('complete', async () => ((await status(name)).rollout?.state === 'Complete' ? true : undefined), 90_000, 500);
    expect(engines()[0]!.argv.join(' ')).toMatch(/--tokens-per-second 6/);
  }, 150_000);

  it('lets a 30 s stream finish before its replica is stopped, and stops an idle one at once', async () => {
    await host();
    const name = await deployReady('v1', 2);
    const stream = startLoad({ routerUrl, model: 'roll', plainClients: 0, streamClients: 1, streamTokens: 150 });
    await sleep(3_000);
    const scaledAt = Date.now();
    await client.workflow.getHandle(`deployment/${name}`).executeUpdate(scaleUpdate, { args: [0] });
    // Both replicas drain: the idle one at once, the busy one once its stream has ended.
    const idleGoneAt = await eventually('the idle engine stopped', () => (engines().length === 1 ? Date.now() : undefined), 20_000, 20);
    const samples = await stream.stop();
    const streamEnded = samples[0]!.end;
    const busyGoneAt = await eventually('the busy engine stopped', () => (engines().length === 0 ? Date.now() : undefined), 60_000, 20);
    console.log(
      `stream ${samples[0]!.end - samples[0]!.start} ms, ok ${samples[0]!.ok}; busy engine stopped ${busyGoneAt - streamEnded} ms after it ended; idle engine ${idleGoneAt - scaledAt} ms after the scale`,
    );
    expect(samples[0]!.ok).toBe(true);
    expect(samples[0]!.end - samples[0]!.start).toBeGreaterThan(25_000);
    expect(busyGoneAt).toBeGreaterThanOrEqual(streamEnded);
    // An idle drain stops at once, not after the drain grace (10 s) or the stream: the figure
    // itself (about 0.5 s here alone, goal 1 s) is bench:rollout's, measured side by side, as a
    // loaded CI machine stretches every Temporal round trip.
    expect(idleGoneAt - scaledAt).toBeLessThan(5_000);
  }, 120_000);

  it('refuses bad rollouts with a clear message and changes nothing', async () => {
    await host();
    const name = await deployReady('v1', 1);
    const handle = client.workflow.getHandle(`deployment/${name}`);
    const refusal = (request: object) =>
      handle.executeUpdate(rolloutUpdate, { args: [request] }).then(
        () => 'accepted',
        (error: unknown) => String((error as { cause?: Error }).cause?.message ?? (error as Error).message),
      );
    expect(await refusal({ profile: 'v9' })).toMatch(/v9.*(v1|valid|profiles)/i);
    expect(await refusal({ profile: 'one-gpu' })).toMatch(/one-gpu/);
    expect(await refusal({ profile: 'nowhere' })).toMatch(/B300/);
    expect(await refusal({ profile: 'v2', maxSurge: 0, maxUnavailable: 0 })).toMatch(/both be 0/);
    expect(await refusal({ profile: 'v2', surge: 1 })).toMatch(/surge/);
    const cli = await runLlmgw(['deploy', 'life', '--name', name]);
    expect(cli.code).toBe(1);
    expect(cli.output).toMatch(/runs model roll, not life/);
    await handle.executeUpdate(undeployUpdate);
    expect(await refusal({ profile: 'v2' })).toMatch(/being undeployed/);
    const view = await status(name).catch(() => undefined);
    expect(view?.rollout).toBeUndefined();
  });
});
