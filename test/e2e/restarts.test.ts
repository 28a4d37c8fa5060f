// A deployment survives its control plane restarting under it: the control worker
// killed mid-deploy, and the Temporal dev server restarted (from its data file)
// mid-deploy. Runs against a dev server of its own, so that no other test's worker
// can stand in for the one this test kills.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { startDevServer, type DevServer } from '../../temporal/dev-server.js';
import { findFreePort } from '../../common/ports.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { deploymentStatusQuery, describeNodeQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import {
  E2E_CATALOG,
  enginesOf,
  eventually,
  INVENTORIES,
  killEnginesOf,
  runLlmgw,
  spawnLlmgw,
  stopAll,
  type LlmgwProcess,
} from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';

let server: DevServer;
let port: number;
let dbFile: string;
const nodeIds = [uniqueId('rst-a'), uniqueId('rst-b')];
let env: Record<string, string>;

async function withClient<T>(body: (client: Client) => Promise<T>): Promise<T> {
  const connection = await Connection.connect({ address: `127.0.0.1:${port}` });
  try {
    return await body(new Client({ connection, dataConverter: llmgwDataConverter() }));
  } finally {
    await connection.close();
  }
}

function status(name: string): Promise<DeploymentView> {
  return withClient((client) => client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery));
}

async function startWorker(): Promise<LlmgwProcess> {
  const worker = spawnLlmgw(['worker', '--catalog', E2E_CATALOG], env);
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  return worker;
}

beforeAll(async () => {
  port = await findFreePort();
  dbFile = join(mkdtempSync(join(tmpdir(), 'llmgw-restarts-')), 'dev.db');
  server = await startDevServer({
    temporalBin: inject('temporalBin'),
    port,
    headless: true,
    dbFile,
    logFile: `.llmgw/test/temporal-restarts-${port}.log`,
  });
  env = { TEMPORAL_ADDRESS: `127.0.0.1:${port}` };
  for (const nodeId of nodeIds) {
    const from = 30000 + Math.floor(Math.random() * 300) * 100;
    const agent = spawnLlmgw(
      [
        'agent',
        '--node-id',
        nodeId,
        '--gpus',
        join(INVENTORIES, 'lifex8.yaml'),
        '--state-dir',
        mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`)),
        '--admin-addr',
        '127.0.0.1:0',
        '--port-range',
        `${from}-${from + 99}`,
        '--presence-heartbeat-seconds',
        '5',
      ],
      env,
    );
    await agent.waitForOutput(/registered with node\//, 60_000);
  }
});

afterAll(async () => {
  await stopAll();
  await killEnginesOf(nodeIds);
  await server?.stop();
});

describe('control plane restarts', () => {
  it('completes a deployment when the control worker is killed -9 mid-deploy and started again', async () => {
    const worker = await startWorker();
    const name = uniqueId('rst-worker');
    const deploy = spawnLlmgw(['deploy', 'life', '--name', name, '--replicas', '2', '--wait', '--timeout', '90'], env);
    await deploy.waitForOutput(/Starting|Loading|Placing/, 30_000);
    await worker.kill9();
    await new Promise((r) => setTimeout(r, 2_000));
    await startWorker();
    expect(await deploy.exited).toBe(0);
    expect((await status(name)).ready).toBe(2);
    expect(enginesOf(nodeIds)).toHaveLength(2);
    expect((await runLlmgw(['undeploy', name], env)).code).toBe(0);
  });

  it('completes a deployment when the dev server is restarted from its data file mid-deploy', async () => {
    const name = uniqueId('rst-server');
    const started = await runLlmgw(['deploy', 'life', '--name', name, '--replicas', '2'], env);
    expect(started.code, started.output).toBe(0);
    await server.stop();
    await new Promise((r) => setTimeout(r, 2_000));
    server = await startDevServer({
      temporalBin: inject('temporalBin'),
      port,
      headless: true,
      dbFile,
      logFile: `.llmgw/test/temporal-restarts-${port}.log`,
    });
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
      const nodes = await withClient((client) =>
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
