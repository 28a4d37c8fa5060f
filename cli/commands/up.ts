// `llmgw up` (npm start): the whole local stack in one command — the Temporal dev
// server (unless TEMPORAL_ADDRESS names one), the control worker, the router, and two
// simulated 8×H100 agents — then the demo deployment with two replicas. Ctrl-C stops
// everything it started, engines included, and gives their GPUs back, so the next
// `npm start` comes up clean.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, openSync, closeSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import { startDevServer, type DevServer } from '../../temporal/dev-server.js';
import { connectClient } from '../../temporal/connection.js';
import { CONTROL_TASK_QUEUE, DEFAULT_PORTS, deploymentWorkflowId, nodeWorkflowId } from '../../common/names.js';
import { deploymentStatusQuery, describeNodeQuery, releaseUpdate, scaleUpdate } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { signalGroup } from '../../agent/supervisor/proc.js';
import { killMarkedEngines } from '../../agent/supervisor/markers.js';

const SIM_NODES = [
  { nodeId: 'sim-a', admin: '127.0.0.1:7401', ports: '18000-18499' },
  { nodeId: 'sim-b', admin: '127.0.0.1:7402', ports: '18500-18999' },
];

export async function upCommand(opts: { catalog: string; routerPort: string; replicas: string }): Promise<void> {
  const stateDir = resolve('.llmgw');
  const logDir = join(stateDir, 'logs');
  mkdirSync(logDir, { recursive: true });
  const children: { name: string; child: ChildProcess }[] = [];
  let server: DevServer | undefined;
  let stopping = false;

  const say = (line: string): void => console.log(`llmgw up: ${line}`);
  const spawnPart = (name: string, args: string[]): void => {
    const fd = openSync(join(logDir, `${name}.log`), 'a');
    const child = spawn(process.execPath, [join(__dirname, '../../../bin/llmgw.js'), ...args], {
      stdio: ['ignore', fd, fd],
      env: process.env,
      detached: true,
    });
    closeSync(fd);
    child.once('exit', (code) => {
      if (!stopping) say(`${name} exited (code ${code}); see ${join(logDir, `${name}.log`)}`);
    });
    children.push({ name, child });
  };

  const shutdown = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    say(`${signal}: stopping everything this started`);
    await teardownDemo().catch((error: unknown) => say(`cleanup: ${error instanceof Error ? error.message : String(error)}`));
    for (const { child } of children.reverse()) if (child.pid) signalGroup(child.pid, 'SIGTERM');
    await Promise.all(children.map(({ child }) => (child.exitCode === null ? new Promise((r) => child.once('exit', r)) : undefined)));
    killSimEngines();
    await server?.stop();
    say('stopped');
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown('Ctrl-C'));
  process.once('SIGTERM', () => void shutdown('SIGTERM'));

  if (process.env.TEMPORAL_ADDRESS) {
    say(`using the Temporal server at ${process.env.TEMPORAL_ADDRESS}`);
  } else {
    say('starting the Temporal dev server (the first run builds the pinned CLI; that takes a few minutes)');
    server = await startDevServer({ port: DEFAULT_PORTS.temporal, uiPort: DEFAULT_PORTS.webUi, stateDir });
    process.env.TEMPORAL_ADDRESS = server.address;
    say(`Temporal ${server.address}, data in ${server.dbFile}`);
  }

  // Engines left by an earlier run that did not stop cleanly are not ours to keep.
  killSimEngines();
  for (const node of SIM_NODES) rmSync(join(stateDir, 'agents', node.nodeId, 'shards'), { recursive: true, force: true });

  spawnPart('worker', ['worker', '--catalog', opts.catalog]);
  for (const node of SIM_NODES) {
    spawnPart(`agent-${node.nodeId}`, [
      'agent',
      '--node-id',
      node.nodeId,
      '--gpus',
      'builtin:h100x8',
      '--state-dir',
      join(stateDir, 'agents', node.nodeId),
      '--admin-addr',
      node.admin,
      '--port-range',
      node.ports,
      '--lost-grace-seconds',
      '60',
    ]);
  }
  if (existsSync(join(__dirname, '../../router/main.js')))
    spawnPart('router', ['router', '--port', opts.routerPort, '--host', '127.0.0.1']);

  const client = await connectClient();
  await waitFor('both simulated agents to register', async () => {
    for (const node of SIM_NODES) {
      const view = await client.workflow.getHandle(nodeWorkflowId(node.nodeId)).query(describeNodeQuery);
      if (view.phase !== 'Ready') return false;
    }
    return true;
  });
  await releaseOrphanedAllocations(client);

  const replicas = Number(opts.replicas);
  try {
    await client.workflow.start('deployModel', {
      workflowId: deploymentWorkflowId('demo'),
      taskQueue: CONTROL_TASK_QUEUE,
      args: [{ model: 'demo', replicas }],
      staticSummary: 'deployment demo (llmgw up)',
    });
  } catch (error) {
    if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    await client.workflow.getHandle(deploymentWorkflowId('demo')).executeUpdate(scaleUpdate, { args: [replicas] });
  }
  const started = Date.now();
  const status = await waitFor('the demo replicas to be Ready', async () => {
    const view: DeploymentView = await client.workflow.getHandle(deploymentWorkflowId('demo')).query(deploymentStatusQuery);
    return view.phase === 'Ready' ? view : undefined;
  });
  const ui = `http://127.0.0.1:${DEFAULT_PORTS.webUi}/namespaces/default/workflows/${encodeURIComponent('deployment/demo')}`;
  console.log(`
llmgw is up: deployment "demo" has ${status.ready}/${status.desired} replicas Ready (${((Date.now() - started) / 1000).toFixed(1)} s after deploy)

  Web UI      ${server ? ui : '(your Temporal UI) workflow deployment/demo'}
  Router      http://127.0.0.1:${opts.routerPort}/v1
  Status      TEMPORAL_ADDRESS=${process.env.TEMPORAL_ADDRESS} npx llmgw status demo

  curl http://127.0.0.1:${opts.routerPort}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"demo","messages":[{"role":"user","content":"Hello!"}]}'

Logs are in ${logDir}. Ctrl-C stops everything.`);

  async function teardownDemo(): Promise<void> {
    // Terminate (not drain) on Ctrl-C: the engines are killed below and their GPUs given
    // back to the node workflows, which stay in the dev server's data file.
    const handle = client.workflow.getHandle(deploymentWorkflowId('demo'));
    const view = await handle.query(deploymentStatusQuery).catch(() => undefined);
    for (const replica of view?.replicas ?? [])
      await client.workflow
        .getHandle(replica.replicaId)
        .terminate('llmgw up stopped')
        .catch(() => undefined);
    await handle.terminate('llmgw up stopped').catch(() => undefined);
    await releaseOrphanedAllocations(client);
  }
}

/** GPUs held for replicas whose workflows are no longer running (an earlier run's). */
async function releaseOrphanedAllocations(client: Client): Promise<void> {
  for (const node of SIM_NODES) {
    const handle = client.workflow.getHandle(nodeWorkflowId(node.nodeId));
    const view = await handle.query(describeNodeQuery).catch(() => undefined);
    for (const allocation of view?.allocations ?? []) {
      const status = await client.workflow
        .getHandle(allocation.replicaId)
        .describe()
        .then(
          (d) => d.status.name,
          () => 'NOT_FOUND',
        );
      if (status !== 'RUNNING') await handle.executeUpdate(releaseUpdate, { args: [{ shardId: allocation.shardId }] });
    }
  }
}

function killSimEngines(): void {
  killMarkedEngines(SIM_NODES.map((node) => node.nodeId));
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 120_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; logs are in .llmgw/logs`);
    await new Promise((r) => setTimeout(r, 300));
  }
}
