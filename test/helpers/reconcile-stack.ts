// The stack test/e2e/reconcile.test.ts runs on: an in-memory dev server of its own (the tests
// restart it empty), a control worker on an editable copy of the catalog, two agents and a
// router, with the helpers the tests share. Real processes throughout.
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, inject } from 'vitest';
import OpenAI from 'openai';
import { Client, Connection } from '@temporalio/client';
import { startDevServer, type DevServer } from '../../temporal/dev-server.js';
import { findFreePort } from '../../common/ports.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { deploymentStatusQuery, describeNodeQuery } from '../../workflows/definitions.js';
import type { DeploymentView, ReplicaInput } from '../../common/replica-types.js';
import type { NodeView } from '../../common/node-types.js';
import type { ReconcileResult } from '../../common/reconcile-types.js';
import { E2E_CATALOG, INVENTORIES, killEnginesOf, runLlmgw, spawnLlmgw, startSimAgent, stopAll, type LlmgwProcess } from './processes.js';
import { uniqueId } from './temporal.js';

export let server: DevServer;
export let port: number;
export let env: Record<string, string>;
export let catalogFile: string;
export let inventoryDir: string;
export let router: OpenAI;
export let routerProc: LlmgwProcess;
export let workerProc: LlmgwProcess;
export const nodeIds = [uniqueId('rec-a'), uniqueId('rec-b')];
export const raceNodes: string[] = [];
export const agents = new Map<string, { proc: LlmgwProcess; stateDir: string; range: string }>();
/**
 * The fleet's engine key (--engine-key-file) on every agent and the router, as in production:
 * engines require their run's key derived from it, across a rebuild by reconciliation too.
 */
const engineKeyFile = join(mkdtempSync(join(tmpdir(), 'llmgw-rec-key-')), 'engine.key');
writeFileSync(engineKeyFile, `engine-key-${uniqueId('rec')}\n`, { mode: 0o600 });

export async function withClient<T>(body: (client: Client) => Promise<T>): Promise<T> {
  const connection = await Connection.connect({ address: `127.0.0.1:${port}` });
  try {
    return await body(new Client({ connection, dataConverter: llmgwDataConverter() }));
  } finally {
    await connection.close();
  }
}

export const status = (name: string): Promise<DeploymentView> =>
  withClient((client) => client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery));
export const nodeView = (nodeId: string): Promise<NodeView> =>
  withClient((client) => client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery));

/** The node's allocations as comparable strings: shard → GPUs. */
export async function allocations(nodeId: string): Promise<string[]> {
  return (await nodeView(nodeId)).allocations.map((a) => `${a.shardId}:${[...a.gpuIndices].sort().join(',')}`).sort();
}

export async function startAgent(
  nodeId: string,
  inventory: string,
  agentEnv: Record<string, string> = {},
  wait = true,
  extra: string[] = [],
): Promise<LlmgwProcess> {
  const known = agents.get(nodeId);
  // A restarted agent keeps its state dir and port range, as on a real host.
  const started = await startSimAgent(nodeId, {
    inventory,
    stateDir: known?.stateDir,
    range: known?.range,
    extra: ['--lost-grace-seconds', '300', '--engine-key-file', engineKeyFile, ...extra],
    env: { ...env, ...agentEnv },
    wait,
  });
  agents.set(nodeId, started);
  return started.proc;
}

export async function reconcile(nodeId: string): Promise<ReconcileResult> {
  const ran = await runLlmgw(['reconcile', nodeId, '--json'], env);
  expect(ran.code, ran.output).toBe(0);
  const results = JSON.parse(ran.output.slice(ran.output.indexOf('['))) as ReconcileResult[];
  return results[0]!;
}

export type ActionOutcome = ReconcileResult['actions'][number];

/**
 * The effective action that `matches`, from any finished reconcile run of the node: a
 * registration's or the Schedule's run may carry out what a test's own run meant to.
 */
export async function actionOfAnyRun(nodeId: string, matches: (action: ActionOutcome) => boolean): Promise<ActionOutcome | undefined> {
  return withClient(async (client) => {
    for await (const run of client.workflow.list({ query: `WorkflowType = 'reconcileNode' AND ExecutionStatus = 'Completed'` })) {
      if (!run.workflowId.startsWith(`reconcile/${nodeId}/`)) continue;
      const result: ReconcileResult = await client.workflow.getHandle(run.workflowId, run.runId).result();
      const action = result.actions.find((a) => a.effective && matches(a));
      if (action) return action;
    }
    return undefined;
  });
}

export async function deploy(model: string, name: string, replicas: number, profile?: string): Promise<DeploymentView> {
  const deployed = await runLlmgw(
    [
      'deploy',
      model,
      '--name',
      name,
      '--replicas',
      String(replicas),
      ...(profile ? ['--profile', profile] : []),
      '--wait',
      '--timeout',
      '90',
    ],
    env,
  );
  expect(deployed.code, deployed.output).toBe(0);
  return status(name);
}

export async function undeploy(name: string): Promise<void> {
  const ran = await runLlmgw(['undeploy', name], env);
  expect(ran.code, ran.output).toBe(0);
}

/** The router's admin address (HOST:PORT): /metrics and the detailed /health. */
export let routerAdmin = '';

/** The router's detailed /health: where its routes come from, and what it holds that Temporal forgot. */
export async function routerHealth(): Promise<{ routes: { held: Array<{ replicaId: string; endpoint: string }> } }> {
  const res = await fetch(`http://${routerAdmin}/health`);
  return (await res.json()) as { routes: { held: Array<{ replicaId: string; endpoint: string }> } };
}

export async function routed(name: string): Promise<boolean> {
  const reply = await router.chat.completions.create({ model: name, max_tokens: 2, messages: [{ role: 'user', content: 'ping' }] });
  return Boolean(reply.choices[0]?.message);
}

/** The stack every reconciliation test shares: its own dev server, a worker, two agents, a router. */
export async function startReconcileStack(): Promise<void> {
  port = await findFreePort();
  server = await startEmptyDevServer();
  env = { TEMPORAL_ADDRESS: `127.0.0.1:${port}` };
  // The worker reads a copy of the catalog that the tests edit; RACE is a GPU class only the
  // startup-race agents have, so those deployments land there and nowhere else.
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-reconcile-'));
  catalogFile = join(dir, 'catalog.yaml');
  copyFileSync(E2E_CATALOG, catalogFile);
  writeFileSync(
    catalogFile,
    `${readFileSync(catalogFile, 'utf8')}  - name: race
    source: engine://llmgw/fake-race
    profiles:
      - name: one-gpu
        engine: fake
        gpuClass: RACE
        gpusPerNode: 1
        args: ["--load-time", "0.5"]
        startupTimeoutSeconds: 30
  - name: hold
    source: engine://llmgw/fake-hold
    profiles:
      - name: one-gpu
        engine: fake
        gpuClass: HOLD
        gpusPerNode: 1
        args: ["--load-time", "0.5", "--tokens-per-second", "200"]
        startupTimeoutSeconds: 30
`,
  );
  inventoryDir = dir;
  // RACE and HOLD: GPU classes only the tests' own extra agents have, so what they deploy
  // there lands there and nowhere else.
  for (const gpuClass of ['RACE', 'HOLD']) {
    writeFileSync(
      join(dir, `${gpuClass.toLowerCase()}x8.yaml`),
      readFileSync(join(INVENTORIES, 'lifex8.yaml'), 'utf8').replace(/^gpuClass: LIFE$/m, `gpuClass: ${gpuClass}`),
    );
  }
  workerProc = spawnLlmgw(['worker', '--catalog', catalogFile], env);
  await workerProc.waitForOutput(/serving task queue llmgw/, 90_000);
  for (const nodeId of nodeIds) await startAgent(nodeId, join(INVENTORIES, 'lifex8.yaml'));
  const routerPort = await findFreePort();
  routerAdmin = `127.0.0.1:${await findFreePort()}`;
  // --debug-headers: the load helpers tell replicas apart by x-llmgw-endpoint.
  routerProc = spawnLlmgw(
    [
      'router',
      '--port',
      String(routerPort),
      '--host',
      '127.0.0.1',
      '--admin-addr',
      routerAdmin,
      '--debug-headers',
      '--engine-key-file',
      engineKeyFile,
    ],
    env,
  );
  await routerProc.waitForOutput(/listening|router/, 30_000);
  router = new OpenAI({ baseURL: `http://127.0.0.1:${routerPort}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 10_000 });
}

/** Registers the stack's hooks: started in beforeAll, ended in afterAll. */
export function useReconcileStack(): void {
  beforeAll(startReconcileStack);
  afterAll(stopReconcileStack);
}

export async function stopReconcileStack(): Promise<void> {
  await stopAll();
  await killEnginesOf([...nodeIds, ...raceNodes]);
  await server?.stop();
}

/** Temporal loses everything: the dev server is stopped and started empty on the same port. */
export async function restartTemporalEmpty(): Promise<void> {
  await server.stop();
  server = await startEmptyDevServer();
}

function startEmptyDevServer(): Promise<DevServer> {
  return startDevServer({
    temporalBin: inject('temporalBin'),
    port,
    headless: true,
    inMemory: true,
    logFile: `.llmgw/test/temporal-reconcile-${port}.log`,
  });
}

/** Every message in a failure's chain of causes, outermost first. */
export function causes(error: unknown): string {
  const messages: string[] = [];
  for (let e = error; e instanceof Error; e = e.cause) messages.push(e.message);
  return messages.join(' <- ');
}

/** The input a replica workflow was started with, as its history records it. */
export async function inputOf(client: Client, replicaId: string): Promise<ReplicaInput> {
  const history = await client.workflow.getHandle(replicaId).fetchHistory();
  const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  return JSON.parse(Buffer.from(payload!.data!).toString('utf8')) as ReplicaInput;
}
