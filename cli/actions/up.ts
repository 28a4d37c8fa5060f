// `llmgw up` (npm start): the whole local stack in one command — the Temporal dev
// server (unless TEMPORAL_ADDRESS names one), the control worker, the router, and two
// simulated 8×H100 agents — then the demo deployment with two replicas (with --real, Gemma 3
// 270M on llama.cpp: up-model.ts). Its ports and directories are planned first (up-plan.ts),
// its processes started by up-parts.ts. Ctrl-C stops everything it started, engines included,
// and gives their GPUs back, so the next `npm start` comes up clean; within 20 s whatever
// Temporal's state (up-teardown.ts), and at once on a second Ctrl-C.
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import { killMarkedEngines } from '../../agent/supervisor/processes/markers.js';
import { createLogger } from '../../common/logger.js';
import { CONTROL_TASK_QUEUE, deploymentWorkflowId, nodeWorkflowId } from '../../common/names.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { connectClient, temporalConfig } from '../../temporal/connection.js';
import { startDevServer } from '../../temporal/dev-server.js';
import { deploymentStatusQuery, describeNodeQuery, scaleUpdate } from '../../workflows/definitions.js';
import { killStack, releaseOrphanedAllocations, stopStack, STOP_BUDGET_MS, type Stack } from './up-teardown.js';
import { endRunsOfEarlierBuilds, logSize } from './up-stale-runs.js';
import { catalogKeyEnv, planStack, type UpOptions, type UpPlan } from './up-plan.js';
import { routerServes, StackParts } from './up-parts.js';
import { recordUpCatalog } from './catalog-check.js';

export type { UpOptions } from './up-plan.js';

export async function upCommand(opts: UpOptions): Promise<void> {
  const logger = createLogger('up');
  const say = (line: string): void => logger.info(line);
  const plan = planStack(opts);
  mkdirSync(plan.logDir, { recursive: true });
  const keyEnv = catalogKeyEnv(plan.stateDir, say);
  const stack: Stack = {
    children: [],
    server: undefined,
    client: undefined,
    nodeIds: plan.nodes.map((n) => n.nodeId),
    deployment: plan.demo.model,
    say,
    catalogKeyFile: keyEnv.LLMGW_CATALOG_KEY_FILE,
  };
  const parts = new StackParts(stack, plan.logDir, keyEnv);
  stopOnSignals(stack, parts);
  try {
    await bringUp(plan, stack, parts);
  } catch (error) {
    // Whatever started must not outlive a failed start.
    if (!parts.stopping) {
      parts.stopping = true;
      say(`could not bring the stack up: ${error instanceof Error ? error.message : String(error)}; stopping what started`);
      await stopStack(stack);
    }
    throw error;
  }
}

/** Ctrl-C or SIGTERM stops the stack within the budget; a second one kills it all now. */
function stopOnSignals(stack: Stack, parts: StackParts): void {
  const onSignal = (signal: string): void => {
    if (parts.stopping) {
      stack.say(`${signal} again: killing everything this started, now`);
      killStack(stack);
      process.exit(130);
    }
    parts.stopping = true;
    const startedAt = Date.now();
    stack.say(`${signal}: stopping everything this started (within ${STOP_BUDGET_MS / 1000} s; ${signal} again to kill it all now)`);
    void stopStack(stack, startedAt)
      .catch((error: unknown) => stack.say(`stopping: ${error instanceof Error ? error.message : String(error)}`))
      .finally(() => {
        stack.say(`stopped in ${((Date.now() - startedAt) / 1000).toFixed(1)} s`);
        process.exit(0);
      });
  };
  process.on('SIGINT', () => onSignal('Ctrl-C'));
  process.on('SIGTERM', () => onSignal('SIGTERM'));
}

async function bringUp(plan: UpPlan, stack: Stack, parts: StackParts): Promise<void> {
  await startTemporal(plan, stack);
  // `llmgw deploy` beside this stack checks a model against its worker's catalog before starting.
  recordUpCatalog(plan.stateDir, temporalConfig().address, plan.catalog);
  await plan.demo.prepare(stack.say);
  // Engines left by an earlier run that did not stop cleanly are not ours to keep.
  killMarkedEngines(stack.nodeIds);
  for (const node of plan.nodes) rmSync(join(plan.stateDir, 'agents', node.nodeId, 'shards'), { recursive: true, force: true });

  const workerLog = { log: join(plan.logDir, 'worker.log'), from: logSize(join(plan.logDir, 'worker.log')) };
  const withRouter = startParts(plan, parts);
  const client = await connectClient();
  stack.client = client;
  await endRunsOfEarlierBuilds(client, workerLog, () => parts.failure, stack.say);
  await parts.waitFor('both simulated agents to register', async () => {
    for (const node of plan.nodes) {
      const view = await client.workflow.getHandle(nodeWorkflowId(node.nodeId)).query(describeNodeQuery);
      if (view.phase !== 'Ready') return false;
    }
    return true;
  });
  await releaseOrphanedAllocations(stack, Date.now() + 30_000);

  const started = Date.now();
  const status = await deployDemo(plan, client, parts);
  // The banner's curl must work the moment it is printed: wait for the router itself to serve demo.
  if (withRouter) await parts.waitFor(`the router to serve ${plan.demo.model}`, () => routerServes(plan.routerPort, plan.demo.model));
  console.log(banner(plan, stack, status, withRouter, Date.now() - started));
}

/** The dev server, unless TEMPORAL_ADDRESS names a server to use. */
async function startTemporal(plan: UpPlan, stack: Stack): Promise<void> {
  if (process.env.TEMPORAL_ADDRESS) {
    stack.say(`using the Temporal server at ${process.env.TEMPORAL_ADDRESS}`);
    return;
  }
  stack.say('starting the Temporal dev server (the first run builds the pinned CLI; that takes a few minutes)');
  stack.server = await startDevServer({
    port: plan.temporalPort,
    uiPort: plan.webUiPort,
    stateDir: plan.stateDir,
    reservedPorts: plan.reservedPorts,
  });
  process.env.TEMPORAL_ADDRESS = stack.server.address;
  stack.say(`Temporal ${stack.server.address} (pid ${stack.server.pid}), data in ${stack.server.dbFile}`);
}

/** The worker, both agents and (where it is built) the router; true when the router is among them. */
function startParts(plan: UpPlan, parts: StackParts): boolean {
  parts.spawn('worker', ['worker', '--catalog', plan.catalog, '--make-current', '--metrics-addr', `127.0.0.1:${plan.workerMetrics}`]);
  for (const node of plan.nodes) {
    parts.spawn(`agent-${node.nodeId}`, [
      'agent',
      ...['--node-id', node.nodeId, '--gpus', 'builtin:h100x8'],
      ...['--state-dir', join(plan.stateDir, 'agents', node.nodeId)],
      ...['--admin-addr', `127.0.0.1:${node.admin}`, '--metrics-addr', `127.0.0.1:${node.metrics}`],
      '--port-range',
      node.ports,
      // Both agents of `llmgw up` share this host: they share claims, under llmgw's state dir.
      ...['--port-claims-dir', join(plan.stateDir, 'port-claims')],
    ]);
  }
  const withRouter = existsSync(join(__dirname, '../../router/main.js'));
  // Loopback only: the demo router has no API keys. The worker's catalog: its models' LoRA
  // adapters are loaded on demand by this router. The stack's own public key, named on the
  // command line: a router reading Temporal installs only what the worker signed, and starts only
  // with a key (or --insecure-routes).
  if (withRouter)
    parts.spawn('router', [
      'router',
      ...['--port', String(plan.routerPort), '--host', '127.0.0.1'],
      ...['--admin-addr', `127.0.0.1:${plan.routerAdmin}`, '--catalog', plan.catalog],
      ...['--catalog-key', parts.env.LLMGW_CATALOG_PUBLIC_KEY_FILE!],
    ]);
  return withRouter;
}

/** Deploys the demo (or scales an earlier run's to the count asked) and waits for it to be Ready. */
async function deployDemo(plan: UpPlan, client: Client, parts: StackParts): Promise<DeploymentView> {
  const { model, replicas } = plan.demo;
  try {
    await client.workflow.start('deployModel', {
      workflowId: deploymentWorkflowId(model),
      taskQueue: CONTROL_TASK_QUEUE,
      args: [{ model, replicas }],
      staticSummary: `deployment ${model} (llmgw up)`,
    });
  } catch (error) {
    if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    await client.workflow.getHandle(deploymentWorkflowId(model)).executeUpdate(scaleUpdate, { args: [replicas] });
  }
  return parts.waitFor(`the ${model} replicas to be Ready`, async () => {
    const view: DeploymentView = await client.workflow.getHandle(deploymentWorkflowId(model)).query(deploymentStatusQuery);
    return view.phase === 'Ready' ? view : undefined;
  });
}

function banner(plan: UpPlan, stack: Stack, status: DeploymentView, withRouter: boolean, deployMs: number): string {
  const { model } = plan.demo;
  const ui = `${stack.server?.uiUrl ?? ''}/namespaces/default/workflows/${encodeURIComponent(`deployment/${model}`)}`;
  const metrics = [
    ...(withRouter ? [`127.0.0.1:${plan.routerAdmin}`] : []),
    `127.0.0.1:${plan.workerMetrics}`,
    ...plan.nodes.map((node) => `127.0.0.1:${node.metrics}`),
  ];
  return `
llmgw is up: deployment "${model}" has ${status.ready}/${status.desired} replicas Ready (${(deployMs / 1000).toFixed(1)} s after deploy)

  Web UI      ${stack.server ? ui : `(your Temporal UI) workflow deployment/${model}`}
  Router      http://127.0.0.1:${plan.routerPort}/v1
  Status      TEMPORAL_ADDRESS=${process.env.TEMPORAL_ADDRESS} npx llmgw status ${model}
  Metrics     ${metrics.map((address) => `http://${address}/metrics`).join('  ')}

  ${plan.demo.curl(plan.routerPort)}

Logs are in ${plan.logDir}. Ctrl-C stops everything.`;
}
