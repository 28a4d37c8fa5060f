// Metrics from every process: /metrics of a real control worker and a real agent, scraped
// after a deployment and a reconciliation, hold the Temporal SDK's runtime metrics and ours.
// Its own Temporal server: on the shared one, other files' workers poll the same task queue
// and may run this file's placements, whose counts then land on their /metrics.
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startDevServer, type DevServer } from '../../temporal/dev-server.js';
import { isAlive } from '../../common/proc-stat.js';
import { signalGroup } from '../../agent/supervisor/processes/proc.js';
import { TEMPORAL_SDK_METRICS } from '../../common/metrics.js';
import { findFreePort } from '../../common/ports.js';
import { E2E_CATALOG, INVENTORIES, eventually, killEnginesOf, runLlmgw, spawnLlmgw, startSimAgent, stopAll } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';

const nodeId = uniqueId('observe');
let workerMetrics: string;
let agentMetrics: string;
let ghost: number | undefined;
let server: DevServer;
let env: Record<string, string>;

async function scrape(address: string): Promise<string> {
  const response = await fetch(`http://${address}/metrics`);
  expect(response.status).toBe(200);
  return response.text();
}

/** The value of the series of `name` that carries these labels (and maybe more), or undefined. */
function value(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    const match = /^(\w+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const present = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([key, wanted]) => present[key] === wanted)) return Number(match[3]);
  }
  return undefined;
}

beforeAll(async () => {
  workerMetrics = `127.0.0.1:${await findFreePort()}`;
  agentMetrics = `127.0.0.1:${await findFreePort()}`;
  const port = await findFreePort();
  server = await startDevServer({
    temporalBin: inject('temporalBin'),
    port,
    headless: true,
    dbFile: join(mkdtempSync(join(tmpdir(), 'llmgw-metrics-')), 'dev.db'),
    logFile: `.llmgw/test/temporal-metrics-${port}.log`,
  });
  env = { TEMPORAL_ADDRESS: `127.0.0.1:${port}` };
  const worker = spawnLlmgw(['worker', '--catalog', E2E_CATALOG, '--metrics-addr', workerMetrics], env);
  await worker.waitForOutput(/serving task queue llmgw/, 90_000);
  await startSimAgent(nodeId, { inventory: join(INVENTORIES, 'observex8.yaml'), extra: ['--metrics-addr', agentMetrics], env });
});

afterAll(async () => {
  if (ghost !== undefined && isAlive(ghost)) signalGroup(ghost, 'SIGKILL');
  await killEnginesOf([nodeId]);
  await stopAll();
  await server?.stop();
});

describe('/metrics on the control worker and on an agent', () => {
  it('serves the Temporal SDK metrics and ours: placements, deployments, reconcile actions; engines, starts, kills, GPUs', async () => {
    const deployment = uniqueId('observe-dep');
    const deployed = await runLlmgw(['deploy', 'observe', '--name', deployment, '--replicas', '1', '--wait', '--timeout', '90'], env);
    expect(deployed.code, deployed.output).toBe(0);
    // A process marked as this agent's that no spec describes: the next survey kills it.
    const child = spawn('sleep', ['300'], {
      detached: true,
      stdio: 'ignore',
      env: { PATH: process.env.PATH, LLMGW_NODE_ID: nodeId, LLMGW_SHARD_ID: 'ghost' },
    });
    child.unref();
    ghost = child.pid!;
    const reconciled = await runLlmgw(['reconcile', nodeId], env);
    expect(reconciled.code, reconciled.output).toBe(0);
    await eventually('the ghost killed', () => !isAlive(ghost!), 15_000);

    const reconcileKill =
      /^llmgw_reconcile_actions\{kind="kill",namespace="default",outcome="done",taskQueue="llmgw",workflowType="reconcileNode"\} [1-9]/m;
    // Metrics are exported on an interval: under load the kill's count can come a little after the kill.
    const worker = await eventually(
      'the worker to count the deployment Ready and the kill',
      async () => {
        const text = await scrape(workerMetrics);
        return (value(text, 'llmgw_deployments', { phase: 'Ready' }) ?? 0) >= 1 && reconcileKill.test(text) ? text : undefined;
      },
      40_000,
    ).catch(async (error: unknown) => {
      console.log(
        (await scrape(workerMetrics))
          .split('\n')
          .filter((line) => line.startsWith('llmgw_'))
          .join('\n'),
      );
      throw error;
    });
    expect(worker).toMatch(/^temporal_\w+/m);
    for (const metric of TEMPORAL_SDK_METRICS.filter((m) => m.onlyWhen === undefined)) {
      expect(worker, metric.name).toMatch(new RegExp(`^${metric.name}(_bucket|_sum|_count)?[{ ]`, 'm'));
    }
    expect(value(worker, 'llmgw_placements', { outcome: 'placed' })).toBeGreaterThanOrEqual(1);
    expect(worker).toMatch(/^llmgw_placement_latency_bucket\{outcome="placed",le="\d+"\} \d+/m);
    // Counted in the workflow sandbox, whose meter adds the namespace, task queue and workflow type.
    expect(worker).toMatch(reconcileKill);
    for (const phase of ['Validating', 'Progressing', 'Ready', 'Degraded', 'Undeploying', 'Undeployed', 'Failed']) {
      expect(worker, phase).toMatch(new RegExp(`^llmgw_deployments\\{phase="${phase}"\\} \\d+$`, 'm'));
    }

    const agent = await eventually(
      'the agent to count its Ready engine',
      async () => {
        const text = await scrape(agentMetrics);
        return value(text, 'llmgw_agent_engines', { llmgw_node: nodeId, state: 'ready' }) === 1 ? text : undefined;
      },
      20_000,
    );
    expect(agent).toMatch(/^temporal_activity_\w+/m);
    expect(value(agent, 'llmgw_agent_engine_starts', { kind: 'new', llmgw_node: nodeId })).toBe(1);
    expect(value(agent, 'llmgw_agent_kills', { llmgw_node: nodeId, reason: 'unidentified' })).toBe(1);
    expect(value(agent, 'llmgw_agent_gpus', { health: 'healthy', llmgw_node: nodeId })).toBe(8);
    expect(value(agent, 'llmgw_agent_gpu_healthy', { gpu: '3', llmgw_node: nodeId })).toBe(1);

    const undeployed = await runLlmgw(['undeploy', deployment], env);
    expect(undeployed.code, undeployed.output).toBe(0);
  });
});
