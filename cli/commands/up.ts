// `llmgw up` (npm start): the whole local stack in one command — the Temporal dev
// server (unless TEMPORAL_ADDRESS names one), the control worker, the router, and two
// simulated 8×H100 agents — then the demo deployment with two replicas. Ctrl-C stops
// everything it started, engines included, and gives their GPUs back, so the next
// `npm start` comes up clean; within 20 s whatever Temporal's state (up-teardown.ts), and
// at once on a second Ctrl-C.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { tailLines } from '../../agent/supervisor/logs.js';
import { killMarkedEngines } from '../../agent/supervisor/markers.js';
import { ensureCatalogKeyFile, publicKeyFileOf } from '../../common/catalog-key.js';
import { createLogger, readableLogLine } from '../../common/logger.js';
import { CONTROL_TASK_QUEUE, DEFAULT_PORTS, deploymentWorkflowId, nodeWorkflowId } from '../../common/names.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { connectClient } from '../../temporal/connection.js';
import { startDevServer } from '../../temporal/dev-server.js';
import { deploymentStatusQuery, describeNodeQuery, scaleUpdate } from '../../workflows/definitions.js';
import { killStack, releaseOrphanedAllocations, stopStack, STOP_BUDGET_MS, type Stack } from './up-teardown.js';
import { endRunsOfEarlierBuilds, logSize } from './up-stale-runs.js';

export interface UpOptions {
  catalog: string;
  routerPort: string;
  replicas: string;
  /** Added to every port this stack opens (two stacks side by side, tests). */
  portOffset?: string;
  /** The simulated agents are `<prefix>-a` and `<prefix>-b`. */
  nodePrefix?: string;
}

export async function upCommand(opts: UpOptions): Promise<void> {
  const logger = createLogger('up');
  const say = (line: string): void => logger.info(line);
  const offset = Number(opts.portOffset ?? 0);
  if (!Number.isInteger(offset) || offset < 0 || offset > 40_000) throw new Error(`--port-offset ${opts.portOffset}: use 0-40000`);
  const port = (base: number): number => base + offset;
  const prefix = opts.nodePrefix ?? 'sim';
  const engines = port(DEFAULT_PORTS.enginesFrom);
  const simNodes = [
    {
      nodeId: `${prefix}-a`,
      admin: port(DEFAULT_PORTS.agentAdmin),
      metrics: port(DEFAULT_PORTS.agentMetrics),
      ports: `${engines}-${engines + 499}`,
    },
    {
      nodeId: `${prefix}-b`,
      admin: port(DEFAULT_PORTS.agentAdmin) + 1,
      metrics: port(DEFAULT_PORTS.agentMetrics) + 1,
      ports: `${engines + 500}-${engines + 999}`,
    },
  ];
  const routerPort = Number(opts.routerPort) + offset;
  // The router's own default: its admin listener (/metrics, detailed /health) on the next port.
  const routerAdmin = routerPort + 1;
  const workerMetrics = port(DEFAULT_PORTS.workerMetrics);
  // With an offset these land among the ports the OS hands out at random, which the dev server
  // takes for its HTTP and metrics endpoints: it must leave these to the parts they are for.
  const promised = new Set([routerPort, routerAdmin, workerMetrics, ...simNodes.flatMap((n) => [n.admin, n.metrics])]);
  const reservedPorts = (p: number): boolean => promised.has(p) || (p >= engines && p <= engines + 999);

  const stateDir = resolve('.llmgw');
  const logDir = join(stateDir, 'logs');
  mkdirSync(logDir, { recursive: true });
  // One catalog key for the worker and both agents (kept across runs, 0600), unless given.
  const keyFile = process.env.LLMGW_CATALOG_KEY_FILE || join(stateDir, 'catalog.key');
  if (ensureCatalogKeyFile(keyFile))
    say(
      `created the catalog key pair ${keyFile} (0600, the worker signs with it) and ${publicKeyFileOf(keyFile)} (the agents and router verify)`,
    );
  // A legacy shared key (no .pub next to it) still serves everyone during the move to Ed25519.
  const publicFile = existsSync(publicKeyFileOf(keyFile)) ? publicKeyFileOf(keyFile) : keyFile;

  const stack: Stack = { children: [], server: undefined, client: undefined, nodeIds: simNodes.map((n) => n.nodeId), say };
  let stopping = false;
  let partFailure: string | undefined;
  const spawnPart = (name: string, args: string[]): void => {
    const fd = openSync(join(logDir, `${name}.log`), 'a');
    const child = spawn(process.execPath, [join(__dirname, '../../../bin/llmgw.js'), ...args], {
      stdio: ['ignore', fd, fd],
      env: { ...process.env, LLMGW_CATALOG_KEY_FILE: keyFile, LLMGW_CATALOG_PUBLIC_KEY_FILE: publicFile },
      detached: true,
    });
    closeSync(fd);
    child.once('exit', (code) => {
      if (stopping) return;
      const log = join(logDir, `${name}.log`);
      say(`${name} exited (code ${code}); see ${log}`);
      // During the start nothing waits for it in vain: the start fails now, saying why.
      partFailure ??= `${name} exited (code ${code}) while the stack was starting: ${lastLine(log)} (see ${log})`;
    });
    stack.children.push({ name, child });
  };

  const onSignal = (signal: string): void => {
    if (stopping) {
      say(`${signal} again: killing everything this started, now`);
      killStack(stack);
      process.exit(130);
    }
    stopping = true;
    const startedAt = Date.now();
    say(`${signal}: stopping everything this started (within ${STOP_BUDGET_MS / 1000} s; ${signal} again to kill it all now)`);
    void stopStack(stack, startedAt)
      .catch((error: unknown) => say(`stopping: ${error instanceof Error ? error.message : String(error)}`))
      .finally(() => {
        say(`stopped in ${((Date.now() - startedAt) / 1000).toFixed(1)} s`);
        process.exit(0);
      });
  };
  process.on('SIGINT', () => onSignal('Ctrl-C'));
  process.on('SIGTERM', () => onSignal('SIGTERM'));

  try {
    await bringUp();
  } catch (error) {
    // Whatever started must not outlive a failed start.
    if (!stopping) {
      stopping = true;
      say(`could not bring the stack up: ${error instanceof Error ? error.message : String(error)}; stopping what started`);
      await stopStack(stack);
    }
    throw error;
  }

  async function bringUp(): Promise<void> {
    if (process.env.TEMPORAL_ADDRESS) {
      say(`using the Temporal server at ${process.env.TEMPORAL_ADDRESS}`);
    } else {
      say('starting the Temporal dev server (the first run builds the pinned CLI; that takes a few minutes)');
      stack.server = await startDevServer({
        port: port(DEFAULT_PORTS.temporal),
        uiPort: port(DEFAULT_PORTS.webUi),
        stateDir,
        reservedPorts,
      });
      process.env.TEMPORAL_ADDRESS = stack.server.address;
      say(`Temporal ${stack.server.address} (pid ${stack.server.pid}), data in ${stack.server.dbFile}`);
    }

    // Engines left by an earlier run that did not stop cleanly are not ours to keep.
    killMarkedEngines(stack.nodeIds);
    for (const node of simNodes) rmSync(join(stateDir, 'agents', node.nodeId, 'shards'), { recursive: true, force: true });

    const workerLog = { log: join(logDir, 'worker.log'), from: logSize(join(logDir, 'worker.log')) };
    spawnPart('worker', ['worker', '--catalog', opts.catalog, '--make-current', '--metrics-addr', `127.0.0.1:${workerMetrics}`]);
    for (const node of simNodes) {
      spawnPart(`agent-${node.nodeId}`, [
        'agent',
        '--node-id',
        node.nodeId,
        '--gpus',
        'builtin:h100x8',
        '--state-dir',
        join(stateDir, 'agents', node.nodeId),
        '--admin-addr',
        `127.0.0.1:${node.admin}`,
        '--metrics-addr',
        `127.0.0.1:${node.metrics}`,
        '--port-range',
        node.ports,
        // Both agents of `llmgw up` share this host: they share claims, under llmgw's state dir.
        '--port-claims-dir',
        join(stateDir, 'port-claims'),
      ]);
    }
    // Loopback only: the demo router has no API keys.
    const withRouter = existsSync(join(__dirname, '../../router/main.js'));
    if (withRouter)
      // The worker's catalog: its models' LoRA adapters are loaded on demand by this router.
      spawnPart('router', [
        'router',
        '--port',
        String(routerPort),
        '--host',
        '127.0.0.1',
        '--admin-addr',
        `127.0.0.1:${routerAdmin}`,
        '--catalog',
        opts.catalog,
      ]);

    const client = await connectClient();
    stack.client = client;
    await endRunsOfEarlierBuilds(client, workerLog, () => partFailure, say);
    await waitFor(
      'both simulated agents to register',
      () => partFailure,
      async () => {
        for (const node of simNodes) {
          const view = await client.workflow.getHandle(nodeWorkflowId(node.nodeId)).query(describeNodeQuery);
          if (view.phase !== 'Ready') return false;
        }
        return true;
      },
    );
    await releaseOrphanedAllocations(stack, Date.now() + 30_000);

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
    const status = await waitFor(
      'the demo replicas to be Ready',
      () => partFailure,
      async () => {
        const view: DeploymentView = await client.workflow.getHandle(deploymentWorkflowId('demo')).query(deploymentStatusQuery);
        return view.phase === 'Ready' ? view : undefined;
      },
    );
    // The banner's curl must work the moment it is printed: wait for the router itself to serve demo.
    if (withRouter)
      await waitFor(
        'the router to serve the demo model',
        () => partFailure,
        () => routerServes(routerPort, 'demo'),
      );
    const ui = `${stack.server?.uiUrl ?? ''}/namespaces/default/workflows/${encodeURIComponent('deployment/demo')}`;
    const metrics = [
      ...(withRouter ? [`127.0.0.1:${routerAdmin}`] : []),
      `127.0.0.1:${workerMetrics}`,
      ...simNodes.map((node) => `127.0.0.1:${node.metrics}`),
    ];
    console.log(`
llmgw is up: deployment "demo" has ${status.ready}/${status.desired} replicas Ready (${((Date.now() - started) / 1000).toFixed(1)} s after deploy)

  Web UI      ${stack.server ? ui : '(your Temporal UI) workflow deployment/demo'}
  Router      http://127.0.0.1:${routerPort}/v1
  Status      TEMPORAL_ADDRESS=${process.env.TEMPORAL_ADDRESS} npx llmgw status demo
  Metrics     ${metrics.map((address) => `http://${address}/metrics`).join('  ')}

  curl http://127.0.0.1:${routerPort}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"demo","messages":[{"role":"user","content":"Hello!"}]}'

Logs are in ${logDir}. Ctrl-C stops everything.`);
  }
}

/** Until `probe` answers, or a part of the stack has failed (`failure` says how), or the timeout. */
async function waitFor<T>(
  what: string,
  failure: () => string | undefined,
  probe: () => Promise<T | undefined | false>,
  timeoutMs = 120_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const failed = failure();
    if (failed !== undefined) throw new Error(failed);
    const value = await probe().catch(() => undefined);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; logs are in .llmgw/logs`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** True once a request for `model` through the router at `port` is answered 200 (one token asked). */
async function routerServes(port: number, model: string): Promise<boolean> {
  const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'ping', max_tokens: 1 }),
    signal: AbortSignal.timeout(5_000),
  });
  await res.body?.cancel();
  return res.ok;
}

/** The last line a part wrote to its log, usually why it stopped; a JSON record as its message. */
function lastLine(file: string): string {
  const line = tailLines(file, 1)[0];
  return line === undefined ? 'its log is empty or cannot be read' : readableLogLine(line).slice(0, 400);
}
