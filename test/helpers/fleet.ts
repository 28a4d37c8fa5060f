// The isolated fleet of an e2e file: what its tests start (control workers, simulated agents
// with their state dirs and port ranges, a private dev server) and the teardown that ends all
// of it and the engines of its node ids. Re-exports the process and Temporal helpers, so an
// e2e file imports its fleet from one place.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { afterAll, afterEach, beforeAll, type TestContext } from 'vitest';
import {
  enginesOf,
  eventually,
  INVENTORIES,
  killEnginesOf,
  spawnControlWorker,
  spawnLlmgw,
  startSimAgent,
  stopAll,
  type LlmgwProcess,
} from './processes.js';
import { testClient, useOwnTemporal } from './temporal.js';
import { startPrivateTemporal, type PrivateTemporal } from './private-temporal.js';

export * from './processes.js';
export * from './temporal.js';
export { startPrivateTemporal, type PrivateTemporal } from './private-temporal.js';

/** A fixture GPU inventory (test/fixtures/inventories/<file>). */
export function inventory(file: string): string {
  return join(INVENTORIES, file);
}

/** A port range of `span` + 1 ports at a random hundred in 30000–59999, as test agents use. */
export function randomPortRange(span = 99): string {
  const from = 30000 + Math.floor(Math.random() * 300) * 100;
  return `${from}-${from + span}`;
}

export interface FleetAgent {
  proc: LlmgwProcess;
  stateDir: string;
  range: string;
}

/**
 * A simulated agent whose admin API listens on loopback TCP (port chosen by the system), for
 * files on a private dev server. `stateDir` and `range` carry an agent's identity over a restart.
 */
export async function startTcpAgent(
  nodeId: string,
  options: { gpus: string; env: Record<string, string>; stateDir?: string; range?: string; extra?: string[]; wait?: boolean },
): Promise<FleetAgent> {
  const stateDir = options.stateDir ?? mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`));
  const range = options.range ?? randomPortRange();
  const proc = spawnLlmgw(
    [
      ...['agent', '--node-id', nodeId, '--gpus', options.gpus, '--state-dir', stateDir],
      ...['--admin-addr', '127.0.0.1:0', '--port-range', range, '--presence-heartbeat-seconds', '5'],
      ...(options.extra ?? []),
    ],
    options.env,
  );
  if (options.wait !== false) await proc.waitForOutput(/registered with node\//, 60_000);
  return { proc, stateDir, range };
}

/** The afterAll of an e2e file: every llmgw process it started, the engines of its nodes, its server and client. */
export async function endFleet(fleet: {
  nodeIds: string[];
  server?: { stop(): Promise<void> };
  closeClient?: () => Promise<void>;
}): Promise<void> {
  await stopAll();
  await killEnginesOf(fleet.nodeIds);
  await fleet.closeClient?.();
  await fleet.server?.stop();
}

/**
 * The afterEach of files whose tests each bring their own hosts: ends the deployments and
 * replicas of the file's GPU class, its agents (the array is emptied) and their engines, so
 * that what one test left behind gives the next one no room. Returns the workflow ids it ended.
 */
export async function isolateGpuClass(client: Client, gpuClass: string, agents: LlmgwProcess[], nodeIds: string[]): Promise<string[]> {
  const ended: string[] = [];
  for await (const execution of client.workflow.list({
    query: `ExecutionStatus = 'Running' AND LlmgwGpuClass = '${gpuClass}' AND (WorkflowType = 'deployModel' OR WorkflowType = 'replica')`,
  })) {
    ended.push(execution.workflowId);
    await client.workflow
      .getHandle(execution.workflowId)
      .terminate('test isolation')
      .catch(() => undefined);
  }
  await Promise.all(agents.splice(0).map((agent) => agent.stop(5_000)));
  await killEnginesOf(nodeIds);
  return ended;
}

export interface IsolatedFleet {
  /** The file's client (set once its beforeAll has run). */
  readonly client: Client;
  /** Every node id the file's agents used: afterAll kills their engines. */
  readonly nodeIds: string[];
  /** The control workers beforeAll started. */
  readonly workers: LlmgwProcess[];
  /** The agents of the running test: with `gpuClass`, stopped after each test. */
  agents: LlmgwProcess[];
  /** The process of the agent last started for this node id. */
  agentOf(nodeId: string): LlmgwProcess;
  /** A simulated agent of this fleet (startSimAgent), its node id and process recorded for teardown. */
  agent(nodeId: string, options: Parameters<typeof startSimAgent>[1]): ReturnType<typeof startSimAgent>;
}

/**
 * Registers an e2e file's fleet hooks: beforeAll connects a client (to a dev server of the
 * file's own where `ownTemporal` names one) and starts `controlWorkers` control workers; with `gpuClass`, afterEach isolates the tests (isolateGpuClass, the ended ids to
 * `afterIsolation`); afterAll ends the fleet (endFleet). Call it at the top of the file, before
 * its own hooks: its afterEach then runs after theirs.
 */
export function useIsolatedFleet(
  options: {
    gpuClass?: string;
    /** How many control workers beforeAll starts (1 by default). */
    controlWorkers?: number;
    ownTemporal?: string;
    /** False: no hooks at all (a file whose tests are skipped on this host). */
    enabled?: boolean;
    afterIsolation?: (ended: string[], context: TestContext) => void;
  } = {},
): IsolatedFleet {
  let client: Client | undefined;
  let closeClient: (() => Promise<void>) | undefined;
  let server: { stop(): Promise<void> } | undefined;
  const byNode = new Map<string, LlmgwProcess>();
  const fleet: IsolatedFleet = {
    get client() {
      if (!client) throw new Error('the fleet client is set in beforeAll');
      return client;
    },
    nodeIds: [],
    workers: [],
    agents: [],
    agentOf(nodeId) {
      const proc = byNode.get(nodeId);
      if (!proc) throw new Error(`no agent started for ${nodeId}`);
      return proc;
    },
    async agent(nodeId, agentOptions) {
      fleet.nodeIds.push(nodeId);
      const started = await startSimAgent(nodeId, agentOptions);
      fleet.agents.push(started.proc);
      byNode.set(nodeId, started.proc);
      return started;
    },
  };
  if (options.enabled === false) return fleet;
  beforeAll(async () => {
    if (options.ownTemporal) server = await useOwnTemporal(options.ownTemporal);
    ({ client, close: closeClient } = await testClient());
    const workers = Array.from({ length: options.controlWorkers ?? 1 }, () => spawnControlWorker());
    fleet.workers.push(...(await Promise.all(workers)));
  });
  if (options.gpuClass) {
    const gpuClass = options.gpuClass;
    afterEach(async (context) => {
      const ended = await isolateGpuClass(fleet.client, gpuClass, fleet.agents, fleet.nodeIds);
      options.afterIsolation?.(ended, context);
    });
  }
  afterAll(() => endFleet({ nodeIds: fleet.nodeIds, closeClient, server }));
  return fleet;
}

export interface PrivateFleet {
  /** The file's own dev server (set once its beforeAll has run). */
  readonly temporal: PrivateTemporal;
  /** TEMPORAL_ADDRESS of that server, for llmgw processes and CLI runs. */
  readonly env: Record<string, string>;
  /** A control worker on the private server. */
  worker(): Promise<LlmgwProcess>;
  /** A simulated agent on the private server (startTcpAgent). */
  agent(nodeId: string, options: Omit<Parameters<typeof startTcpAgent>[1], 'env'>): Promise<FleetAgent>;
}

/**
 * Registers the hooks of an e2e file that runs on a dev server of its own (it stops or kills
 * it): beforeAll starts the server (startPrivateTemporal with `label`); afterAll ends the
 * fleet: every llmgw process, the engines of `nodeIds`, the server. Call it before the file's
 * own beforeAll, which starts the workers and agents it needs.
 */
export function usePrivateFleet(nodeIds: string[], label: string, dataLabel = label): PrivateFleet {
  let temporal: PrivateTemporal | undefined;
  const fleet: PrivateFleet = {
    get temporal() {
      if (!temporal) throw new Error('the private dev server starts in beforeAll');
      return temporal;
    },
    get env() {
      return fleet.temporal.env;
    },
    worker: () => spawnControlWorker(fleet.env),
    agent: (nodeId, options) => startTcpAgent(nodeId, { ...options, env: fleet.env }),
  };
  beforeAll(async () => {
    temporal = await startPrivateTemporal(label, dataLabel);
  });
  afterAll(() => endFleet({ nodeIds, server: temporal }));
  return fleet;
}

/** An e2e file's afterAll for its one deployment: undeploy it and wait (60 s at most) for its engines to go. */
export async function undeployAndWait(client: Client, name: string, nodeIds: string[]): Promise<void> {
  const { undeployUpdate } = await import('../../workflows/definitions.js');
  await client.workflow
    .getHandle(`deployment/${name}`)
    .executeUpdate(undeployUpdate)
    .catch(() => undefined);
  await eventually('engines gone', () => (enginesOf(nodeIds).length === 0 ? true : undefined), 60_000).catch(() => undefined);
}
