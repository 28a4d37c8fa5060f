// `llmgw agent`: the only llmgw process that touches a GPU host. Discovers the host,
// takes over (or kills) what a previous agent left running, serves the node-local
// activities on `agent/<nodeId>`, registers with node/<nodeId>, and keeps engines
// running across its own restarts and across Temporal outages.
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { agentTaskQueue, CONTROL_TASK_QUEUE, DEFAULT_AGENT_METRICS_ADDR, nodeWorkflowId } from '../common/names.js';
import { createLogger, lineLog } from '../common/logger.js';
import {
  installRuntime,
  llmgwDataConverter,
  metricsAddressOf,
  QUICK_RECONNECT_CHANNEL_ARGS,
  temporalConfig,
} from '../temporal/connection.js';
import { agentStoppingSignal, registerSignal, runningShardsSignal } from '../workflows/definitions.js';
import type { node as nodeWorkflow } from '../workflows/node/workflow.js';
import type { AgentSettings } from '../common/node-types.js';
import { parseAgentFlags, type AgentConfig } from './config.js';
import { discoverHost, interfaceOf } from './host.js';
import { createAgentActivities } from './activities.js';
import { createTransitionNotifier } from './notifier.js';
import { createDrainer } from './drain.js';
import { presenceHeartbeatFor, SHORT_PRESENCE_SECONDS, watchNodeWorkflow } from './presence.js';
import { createShardReporter, runningShardIds, type ShardReporter } from './shard-report.js';
import { startAdminServer } from './admin/server.js';
import { createSupervisor } from './supervisor/supervisor.js';
import { createRayWait } from './ray-wait.js';
import { logPath } from './supervisor/spec-store.js';
import { tailLines } from './supervisor/logs.js';
import { createRevisionCheck } from './revision-check.js';
import { preflight } from './preflight.js';
import { createHostReports, gpuProcessesOf } from './reports.js';
import { createAgentMetrics } from './metrics.js';

export async function runAgent(flags: Record<string, unknown>): Promise<void> {
  const config = parseAgentFlags(flags);
  const logger = createLogger('agent').child({ nodeId: config.nodeId });
  const log = lineLog(logger);
  const revisionPolicy = preflight(config, log);

  const discovered = await discoverHost(config);
  log(
    `host: ${discovered.gpus.length}× ${discovered.gpuClass || 'no GPU'}${discovered.problems.length ? `; problems: ${discovered.problems.join('; ')}` : ''}`,
  );
  // Before anything the SDK or our metrics do: one logger, one /metrics endpoint. After the
  // checks above: an installed Runtime keeps the process alive until it exits.
  const metricsAddress = metricsAddressOf(config.metricsAddr, DEFAULT_AGENT_METRICS_ADDR);
  const runtime = installRuntime({ logger, ...(metricsAddress ? { metricsAddress } : {}), globalTags: { llmgw_node: config.nodeId } });
  const metrics = createAgentMetrics(runtime.metricMeter);
  if (metricsAddress) log(`metrics on http://${metricsAddress}/metrics`);

  let client: Client | undefined;
  const notifier = createTransitionNotifier(() => client, log);
  // Startup-race tests end the agent with SIGKILL at a chosen point of a start: after the
  // spec is written but before the spawn, or after the spawn but before startShard returns.
  const crashAt = process.env.LLMGW_TEST_CRASH_AT;
  const crash = (where: string) => (): void => {
    log(`LLMGW_TEST_CRASH_AT=${where}: killing this agent with SIGKILL`);
    process.kill(process.pid, 'SIGKILL');
  };
  // Told of every transition; created once Temporal is configured (below).
  // eslint-disable-next-line prefer-const -- assigned once Temporal is configured; transitions may fire before
  let shardReporter: ShardReporter | undefined;
  const supervisor = createSupervisor({
    ...(crashAt === 'before-spawn' ? { beforeSpawn: crash(crashAt) } : {}),
    ...(crashAt === 'after-spawn' ? { afterSpawn: crash(crashAt) } : {}),
    nodeId: config.nodeId,
    stateDir: config.stateDir,
    portRange: config.portRange,
    advertiseAddress: config.advertiseAddr,
    engineContext: {
      fakeEngineCommand: config.fakeEngineCommand,
      rayCommand: [config.rayCommand],
      rayWorkerPorts: config.rayWorkerPorts,
      managementInterface: interfaceOf(config.advertiseAddr),
    },
    // Rank 0 of a Ray launch starts its engine only once `ray status` shows every node.
    waitForRay: createRayWait({ rayCommand: [config.rayCommand], log }),
    onTransition: (status) => {
      notifier.send(status);
      shardReporter?.changed();
    },
    log,
    passEnv: config.passEnv,
    maxLogBytes: config.maxLogSize,
    logRetentionMs: config.logRetention,
    ...(config.envFile !== undefined ? { envFile: config.envFile } : {}),
    dryRun: config.reconcile === 'dry-run',
    foreignGpuProcesses: config.foreignGpuProcesses,
    checkRevision: createRevisionCheck(revisionPolicy),
    count: (event) => metrics.count(event),
  });
  // Before anything can start a new engine: adopt what is ours, end what nobody can describe,
  // and sort out the compute processes on our GPUs that are not ours.
  const recovered = await supervisor.recover(gpuProcessesOf(config, discovered));
  const dry = config.reconcile === 'dry-run' ? ' (dry run: nothing killed)' : '';
  log(
    `recovered: ${recovered.adopted.length} adopted, ${recovered.exited.length} found exited, ${recovered.unidentified.filter((u) => u.killed).length} unidentified killed, ${recovered.foreign.length} foreign on our GPUs${dry}`,
  );

  let adminAddress = '';
  const hostReports = createHostReports({ config, supervisor, host: discovered, recovered, adminAddress: () => adminAddress });
  const { describe, survey } = hostReports;
  const admin = await startAdminServer(config.adminAddr, {
    describe,
    logFile: (shardId) => logPath(config.stateDir, shardId),
    tailLines,
  });
  adminAddress = `${config.adminAddr.replace(/:\d+$/, '')}:${admin.port}`;
  log(`admin API on ${adminAddress} (Describe, TailLogs, gRPC health)`);
  const gauges = setInterval(() => metrics.observe(hostReports.view()), 5_000);
  gauges.unref();
  metrics.observe(hostReports.view());

  const { connectionOptions, namespace } = temporalConfig();
  shardReporter = createShardReporter({
    list: () => supervisor.list(),
    send: async (shardIds) => {
      await client?.workflow
        .getHandle(nodeWorkflowId(config.nodeId))
        .signal(runningShardsSignal, { shardIds, at: new Date().toISOString() });
    },
    log: (line) => log(line, 'warn'),
  });
  const nodeInput = {
    nodeId: config.nodeId,
    // Decided once Temporal answers (presenceHeartbeatFor): long where worker heartbeats watch us.
    presenceHeartbeatSeconds: config.presenceHeartbeatSeconds ?? SHORT_PRESENCE_SECONDS,
    lostGraceSeconds: config.lostGraceSeconds,
    reconcileDryRun: config.reconcile === 'dry-run',
    reconcileEverySeconds: config.reconcileEverySeconds,
    ...(config.nodeContinueAsNewAfterEvents ? { continueAsNewAfterEvents: config.nodeContinueAsNewAfterEvents } : {}),
  };
  const register = async (): Promise<void> => {
    if (!client) return;
    const report = await describe();
    // The settings travel with every registration, so a restarted agent's flags take effect.
    const {
      nodeId: _nodeId,
      continueAsNewAfterEvents: _bound,
      ...settings
    } = nodeInput as typeof nodeInput & { continueAsNewAfterEvents?: number };
    await client.workflow.signalWithStart<typeof nodeWorkflow, [typeof report, AgentSettings?]>('node', {
      workflowId: nodeWorkflowId(config.nodeId),
      taskQueue: CONTROL_TASK_QUEUE,
      args: [nodeInput],
      signal: registerSignal,
      signalArgs: [report, settings],
    });
    shardReporter?.registered(runningShardIds(report.runningShards));
    log(`registered with ${nodeWorkflowId(config.nodeId)} (${report.runningShards.length} shards)`);
  };
  const registerSoon = (): void => {
    register().catch((error: unknown) =>
      log(`registration failed (will retry): ${error instanceof Error ? error.message : String(error)}`, 'warn'),
    );
  };

  // Temporal may be down when the agent starts: engines keep running and the agent keeps
  // trying, because nothing about the host depends on the control plane being up.
  let connection: NativeConnection | undefined;
  for (let attempt = 1; !connection; attempt++) {
    try {
      connection = await NativeConnection.connect(connectionOptions);
      const clientConnection = await Connection.connect({ ...connectionOptions, channelArgs: { ...QUICK_RECONNECT_CHANNEL_ARGS } });
      client = new Client({ connection: clientConnection, namespace, dataConverter: llmgwDataConverter() });
    } catch (error) {
      connection = undefined;
      log(
        `cannot reach Temporal at ${connectionOptions.address} (attempt ${attempt}): ${error instanceof Error ? error.message : String(error)}; retrying`,
        'warn',
      );
      await new Promise((r) => setTimeout(r, Math.min(10_000, 1_000 * attempt)));
    }
  }

  nodeInput.presenceHeartbeatSeconds = await presenceHeartbeatFor(config.presenceHeartbeatSeconds, client!);
  log(
    `presence heartbeat ${nodeInput.presenceHeartbeatSeconds} s${config.presenceHeartbeatSeconds === undefined ? ' (worker heartbeats watch this agent; see workers/liveness.ts)' : ''}`,
  );

  // If the node workflow is gone (Temporal lost its data) no presence activity comes:
  // the watchdog below registers again, which starts it anew.
  let lastPresence = Date.now();
  const drainer = createDrainer({ statusOf: (shardId) => supervisor.status(shardId), send: (status) => notifier.send(status), log });
  const activities = createAgentActivities({
    supervisor,
    drain: (request) => drainer.drain(request),
    describe,
    survey,
    onPresenceStarted: registerSoon,
    presenceSummary: () => {
      lastPresence = Date.now();
      const host = hostReports.host();
      return {
        shards: supervisor.list().length,
        gpus: host.gpus.length,
        unhealthyGpus: host.gpus.filter((gpu) => gpu.health?.problems.length).map((gpu) => gpu.index),
      };
    },
  });
  const worker = await Worker.create({
    connection,
    namespace,
    taskQueue: agentTaskQueue(config.nodeId),
    activities,
    dataConverter: llmgwDataConverter(),
    // Presence runs for as long as the agent lives; leave room for engine starts besides.
    maxConcurrentActivityTaskExecutions: 200,
    shutdownGraceTime: '5 seconds',
  });

  registerSoon();
  const watchdog = setInterval(() => {
    if (Date.now() - lastPresence > nodeInput.presenceHeartbeatSeconds * 2000) {
      lastPresence = Date.now();
      registerSoon();
    }
  }, 1_000);
  // With a slow presence, a node workflow that is gone (Temporal lost its data, or someone
  // ended it) would be noticed late: look at it directly, a read that costs no event.
  const nodeWatch = watchNodeWorkflow(() => client, nodeWorkflowId(config.nodeId), registerSoon);

  const stop = (signal: string): void => {
    log(`${signal}: shutting down (engines keep running; a restarted agent adopts them)`);
    clearInterval(watchdog);
    nodeWatch.stop();
    clearInterval(gauges);
    // Say so, so the node is NotReady now rather than after a heartbeat timeout.
    void client?.workflow
      .getHandle(nodeWorkflowId(config.nodeId))
      .signal(agentStoppingSignal, { reason: signal })
      .catch(() => undefined);
    worker.shutdown();
    // With Temporal unreachable the worker would wait for ever to report its last
    // activities; nothing on the host needs that, so leave after a bounded wait.
    setTimeout(() => {
      log('Temporal did not confirm the shutdown in 15 s; exiting anyway', 'warn');
      process.exit(0);
    }, 15_000).unref();
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));

  log(
    `serving ${agentTaskQueue(config.nodeId)}; state dir ${config.stateDir}; engine ports ${config.portRange.from}-${config.portRange.to}`,
  );
  try {
    await worker.run();
  } finally {
    drainer.close();
    shardReporter?.close();
    notifier.close();
    supervisor.close();
    await admin.close();
    await connection.close();
  }
}

export type { AgentConfig };
