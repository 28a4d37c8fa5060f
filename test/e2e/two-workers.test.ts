// Two control workers, the production setup: `kill -9` of either one under load through the
// router leaves every deployment Ready throughout and loses no request, and the survivor
// alone places (a scale-up), reconciles and drains (a scale-down) until the other is back.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { eventually, INVENTORIES, runLlmgw, sleep, spawnControlWorker, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';
import { spawnTestRouter } from '../helpers/router-process.js';
import { startLoad, summarise } from '../helpers/load.js';
import { deploymentsReady, readyReplicas } from '../helpers/readiness.js';

const TWO = join(INVENTORIES, 'twox8.yaml');
const nodeIds = [uniqueId('two-a'), uniqueId('two-b')];
const steady = { name: uniqueId('two-steady'), replicas: 2 };
const scaled = { name: uniqueId('two-scaled'), replicas: 2 };
const fleet = useIsolatedFleet({ ownTemporal: 'two-workers', controlWorkers: 2 });
let client: Client;
let routerUrl = '';
const workers = fleet.workers;

beforeAll(async () => {
  client = fleet.client;
  for (const nodeId of nodeIds) await fleet.agent(nodeId, { inventory: TWO });
  // --debug-headers: the load helper tells replicas apart by x-llmgw-endpoint.
  routerUrl = (await spawnTestRouter(['--debug-headers'])).url;
  for (const d of [steady, scaled]) {
    const deployed = await runLlmgw(['deploy', 'two', '--name', d.name, '--replicas', String(d.replicas), '--wait', '--timeout', '90']);
    expect(deployed.code, deployed.output).toBe(0);
  }
  await eventually('the router serves both deployments', async () => {
    for (const d of [steady, scaled]) {
      const answer = await fetch(`${routerUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: d.name, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
      });
      if (!answer.ok) return undefined;
    }
    return true;
  });
});

afterAll(async () => {
  for (const d of [steady, scaled]) await runLlmgw(['undeploy', d.name]).catch(() => undefined);
});

/** Samples readiness every 250 ms: the steady deployment must stay Ready, the scaled one never below `floor`. */
function watchReadiness(floor: () => number): { stop(): Promise<string[]> } {
  let running = true;
  const lapses: string[] = [];
  const loop = (async () => {
    while (running) {
      const at = new Date().toISOString().slice(11, 23);
      if (!(await deploymentsReady(client, [steady]))) lapses.push(`${at} ${steady.name} not Ready`);
      const ready = await readyReplicas(client, scaled.name);
      if (ready < floor()) lapses.push(`${at} ${scaled.name}: ${ready} Ready, fewer than ${floor()}`);
      await sleep(250);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return lapses;
    },
  };
}

describe('two control workers', () => {
  it('lose one to kill -9 under load with every deployment Ready throughout and no request lost', async () => {
    const loads = [steady, scaled].map((d) => startLoad({ routerUrl, model: d.name, plainClients: 2, streamClients: 1, streamTokens: 40 }));
    let floor = 2;
    const watch = watchReadiness(() => floor);

    for (const [down, up] of [
      [0, 1],
      [1, 0],
    ] as const) {
      const killed = workers[down]!.pid;
      await workers[down]!.kill9();
      // The survivor alone: placement (scale up), reconciliation, and a drain (scale down).
      const target = down === 0 ? 3 : 2;
      floor = Math.min(floor, target);
      const scaling = await runLlmgw(['scale', scaled.name, String(target)]);
      expect(scaling.code, scaling.output).toBe(0);
      await eventually(
        `${scaled.name} at ${target} Ready with worker pid ${killed} dead (worker pid ${workers[up]!.pid} alone)`,
        async () => ((await deploymentsReady(client, [{ name: scaled.name, replicas: target }])) ? true : undefined),
        90_000,
        500,
      );
      floor = target;
      const reconciled = await runLlmgw(['reconcile', ...nodeIds, '--json']);
      expect(reconciled.code, reconciled.output).toBe(0);
      workers[down] = await spawnControlWorker();
      await sleep(3_000);
    }

    const lapses = await watch.stop();
    const samples = (await Promise.all(loads.map((l) => l.stop()))).flat();
    console.log(`two workers, each killed once under load: ${summarise(samples)}; ${lapses.length} readiness lapses`);
    expect(lapses).toEqual([]);
    expect(samples.filter((s) => !s.ok).map((s) => s.error)).toEqual([]);
    expect(samples.length).toBeGreaterThan(20);
  }, 600_000);
});
