// A deployment survives its control plane restarting under it: the control worker
// killed mid-deploy, and the Temporal dev server restarted (from its data file)
// mid-deploy. Runs against a dev server of its own, so that no other test's worker
// can stand in for the one this test kills.
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { describeNodeQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { enginesOf, eventually, INVENTORIES, runLlmgw, spawnLlmgw, uniqueId, usePrivateFleet } from '../helpers/fleet.js';

const nodeIds = [uniqueId('rst-a'), uniqueId('rst-b')];
const fleet = usePrivateFleet(nodeIds, 'restarts');
let env: Record<string, string>;

const status = (name: string): Promise<DeploymentView> => fleet.temporal.status(name);

beforeAll(async () => {
  env = fleet.env;
  // No control worker runs yet (each test starts its own), and a node acts on a registration
  // only once a control worker has checked its signature: wait for the agents to serve.
  for (const nodeId of nodeIds) {
    const agent = await fleet.agent(nodeId, { gpus: join(INVENTORIES, 'lifex8.yaml'), wait: false });
    await agent.proc.waitForOutput(/serving agent\//, 60_000);
  }
});

describe('control plane restarts', () => {
  it('completes a deployment when the control worker is killed -9 mid-deploy and started again', async () => {
    const worker = await fleet.worker();
    const name = uniqueId('rst-worker');
    const deploy = spawnLlmgw(['deploy', 'life', '--name', name, '--replicas', '2', '--wait', '--timeout', '90'], env);
    // Killed as soon as the deployment is started: before it can be Ready, whatever the load.
    // (Waiting for a status line instead raced a fast deploy against the CLI's first look.)
    await deploy.waitForOutput(/started deployment\//, 30_000);
    await worker.kill9();
    await new Promise((r) => setTimeout(r, 2_000));
    await fleet.worker();
    expect(await deploy.exited).toBe(0);
    expect((await status(name)).ready).toBe(2);
    expect(enginesOf(nodeIds)).toHaveLength(2);
    expect((await runLlmgw(['undeploy', name], env)).code).toBe(0);
  });

  it('completes a deployment when the dev server is restarted from its data file mid-deploy', async () => {
    const name = uniqueId('rst-server');
    const started = await runLlmgw(['deploy', 'life', '--name', name, '--replicas', '2'], env);
    expect(started.code, started.output).toBe(0);
    await fleet.temporal.stop();
    await new Promise((r) => setTimeout(r, 2_000));
    await fleet.temporal.restart();
    let last: unknown;
    const ready = await eventually(
      'Ready after the restart',
      async () => {
        const view = await status(name);
        last = view;
        return view.phase === 'Ready' ? view : undefined;
      },
      150_000,
      500,
    ).catch(async (error: unknown) => {
      // Say where it stuck: the deployment's view and what the nodes think.
      const nodes = await fleet.temporal.withClient((client) =>
        Promise.all(
          nodeIds.map((id) =>
            client.workflow
              .getHandle(`node/${id}`)
              .query(describeNodeQuery)
              .catch((e: unknown) => String(e)),
          ),
        ),
      );
      console.log(JSON.stringify({ last, nodes }, null, 1).slice(0, 6000));
      throw error;
    });
    expect(ready.ready).toBe(2);
    expect(enginesOf(nodeIds).length).toBeGreaterThanOrEqual(2);
    expect((await runLlmgw(['undeploy', name], env)).code).toBe(0);
    await eventually('no engines', () => enginesOf(nodeIds).length === 0, 30_000);
  });
});
