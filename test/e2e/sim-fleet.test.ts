// The simulated fleet itself, end to end: a few hosts of `llmgw sim-fleet` in one process
// against a real dev server and a real control worker. A restarted fleet adopts the very
// virtual engines it left (kept serving all along), and a killed host's replicas are placed
// again elsewhere, with no GPU held twice at any point.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery, describeNodeQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import type { NodeView } from '../../common/node-types.js';
import { gpusHeldTwice } from '../../sim/double-held.js';
import { testClient, uniqueId, useOwnTemporal } from '../helpers/temporal.js';
import { eventually, INVENTORIES, runLlmgw, spawnControlWorker, stopAll } from '../helpers/processes.js';
import { fleetPortBase, killEngineHosts, startSimFleet, type EngineRow, type SimFleet } from '../helpers/sim-fleet.js';

const INVENTORY = join(INVENTORIES, 'simfleetx8.yaml');
const HOST_FLAGS = ['--presence-heartbeat-seconds', '5', '--lost-grace-seconds', '8'];
let client: Client;
let closeClient: () => Promise<void>;

let ownTemporal: { stop(): Promise<void> } | undefined;

beforeAll(async () => {
  ownTemporal = await useOwnTemporal('sim-fleet');
  ({ client, close: closeClient } = await testClient());
  await spawnControlWorker();
});

afterAll(async () => {
  await stopAll();
  killEngineHosts();
  await closeClient();
  await ownTemporal?.stop();
});

function status(name: string): Promise<DeploymentView> {
  return client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
}

async function allReady(name: string, replicas: number): Promise<DeploymentView | undefined> {
  const view = await status(name);
  return view.replicas.filter((r) => r.phase === 'Ready').length === replicas ? view : undefined;
}

async function doubleHeld(fleet: SimFleet): Promise<string[]> {
  const nodes = await Promise.all(
    fleet.nodeIds.map((id) => client.workflow.getHandle(`node/${id}`).query(describeNodeQuery) as Promise<NodeView>),
  );
  return gpusHeldTwice(nodes, await fleet.engines());
}

/** Polls every engine's /health until stopped; counts the answers that were not 200. */
function watchServing(engines: EngineRow[]): { stop(): Promise<{ probes: number; failures: string[] }> } {
  let running = true;
  const failures: string[] = [];
  let probes = 0;
  const loop = (async () => {
    while (running) {
      for (const engine of engines) {
        probes++;
        const answer = await fetch(`http://127.0.0.1:${engine.port}/health`).then(
          (r) => String(r.status),
          (error: unknown) => String(error),
        );
        if (answer !== '200') failures.push(`${engine.shardId}: ${answer}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { probes, failures };
    },
  };
}

describe('llmgw sim-fleet', () => {
  it('adopts its own engines after a restart, still serving, and re-places a killed host’s replicas', async () => {
    const prefix = `${uniqueId('sf')}-`;
    const portBase = fleetPortBase();
    const options = { hosts: 3, prefix, inventory: INVENTORY, portBase, extra: HOST_FLAGS };
    const first = await startSimFleet(options);
    const name = uniqueId('simfleet');
    const deployed = await runLlmgw(['deploy', 'simfleet', '--name', name, '--replicas', '4', '--wait']);
    expect(deployed.code, deployed.output).toBe(0);
    const before = await first.engines();
    expect(before).toHaveLength(4);
    expect(await doubleHeld(first)).toEqual([]);

    // A crash of the whole fleet process: every agent dies at once; the engines do not.
    const serving = watchServing(before);
    await first.proc.kill9();
    const second = await startSimFleet({ ...options, stateDir: first.stateDir });
    expect(second.proc.output()).toMatch(/engine host on .* is running/);
    const view = await eventually('every replica Ready after the restart', () => allReady(name, 4), 60_000);
    const { probes, failures } = await serving.stop();
    expect(failures, `${failures.length} of ${probes} health probes failed`).toEqual([]);
    // The same engines (pid and start time), on the same ports, serve the same replicas.
    const after = await second.engines();
    const identity = (rows: EngineRow[]) => rows.map((e) => `${e.shardId} ${e.pid} ${e.startTicks} ${e.port}`).sort();
    expect(identity(after)).toEqual(identity(before));
    expect(view.replicas.map((r) => r.endpoint).sort()).toEqual(before.map((e) => `http://127.0.0.1:${e.port}`).sort());
    expect(second.proc.output()).toMatch(/recovered: \d+ adopted/);
    expect(await doubleHeld(second)).toEqual([]);

    // Host loss: the host that runs the most replicas dies, engines and all.
    const counts = new Map<string, number>();
    for (const e of after) counts.set(e.nodeId, (counts.get(e.nodeId) ?? 0) + 1);
    const victim = [...counts].sort((a, b) => b[1] - a[1])[0]![0];
    await second.control(`kill ${victim}`);
    expect((await second.engines()).filter((e) => e.nodeId === victim)).toEqual([]);
    const replaced = await eventually(
      `the replicas of ${victim} Ready elsewhere`,
      async () => {
        const ready = await allReady(name, 4);
        return ready && ready.replicas.every((r) => !r.nodes.includes(victim)) ? ready : undefined;
      },
      90_000,
    );
    expect(replaced.replicas.flatMap((r) => r.nodes)).not.toContain(victim);
    expect(await doubleHeld(second)).toEqual([]);
    const nodes = await runLlmgw(['nodes']);
    expect(nodes.output).toMatch(new RegExp(`${victim}\\s*│\\s*(NotReady|Lost)`));

    expect((await runLlmgw(['undeploy', name])).code).toBe(0);
  });
});
