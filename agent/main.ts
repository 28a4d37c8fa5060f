// `llmgw agent`: the only llmgw process that touches a GPU host. Discovers the host,
// takes over (or kills) what a previous agent left running, serves the node-local
// activities on `agent/<nodeId>`, registers with node/<nodeId>, and keeps engines
// running across its own restarts and across Temporal outages.
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { UnidentifiedProcess } from '../proto/gen/llmgw/v1/register_pb.js';
import type { GpuProcess } from './supervisor/strangers.js';
import { agentTaskQueue, CONTROL_TASK_QUEUE, nodeWorkflowId } from '../common/names.js';
import { createLogger, lineLog } from '../common/logger.js';
import { installRuntime, llmgwDataConverter, QUICK_RECONNECT_CHANNEL_ARGS, temporalConfig } from '../temporal/connection.js';
import { agentStoppingSignal, registerSignal } from '../workflows/definitions.js';
import type { node as nodeWorkflow } from '../workflows/node/workflow.js';
import { parseAgentFlags, type AgentConfig } from './config.js';
import { discoverHost, interfaceOf } from './host.js';
import { buildRegister } from './register.js';
import { createAgentActivities } from './activities.js';
import { createTransitionNotifier } from './notifier.js';
import { startAdminServer } from './admin/server.js';
import { createSupervisor } from './supervisor/supervisor.js';
import { createRayWait } from './ray-wait.js';
import { checkStateDirWritable, logPath } from './supervisor/spec-store.js';
import { tailLines } from './supervisor/logs.js';
import { createRevisionCheck, type RevisionPolicy } from './revision-check.js';
import { envFileWarnings, readEnvFile } from './host-env.js';
import { keyFileWarnings, readCatalogKeys } from '../common/catalog-key.js';
import type { LineLog } from '../common/logger.js';

export async function runAgent(flags: Record<string, unknown>): Promise<void> {
  const config = parseAgentFlags(flags);
  const logger = createLogger('agent').child({ nodeId: config.nodeId });
  const log = lineLog(logger);
  // An agent that cannot write specs cannot start engines safely, nor identify them after
  // a restart: refuse to run rather than half-work.
  checkStateDirWritable(config.stateDir);

  const revisionPolicy = revisionPolicyOf(config, log);
  // Secrets stay on the host: a bad env file stops the agent now; names only are logged.
  if (config.envFile !== undefined) {
    const names = Object.keys(readEnvFile(config.envFile));
    for (const warning of envFileWarnings(config.envFile)) log(warning, 'warn');
    log(`env file ${config.envFile}: ${names.length} variable(s) engines may reference (${names.join(', ') || 'none'})`);
  }
  if (config.passEnv.length > 0) log(`passing ${config.passEnv.join(', ')} from this agent's environment to every engine`);

  let host = await discoverHost(config);
  log(`host: ${host.gpus.length}× ${host.gpuClass || 'no GPU'}${host.problems.length ? `; problems: ${host.problems.join('; ')}` : ''}`);

  let client: Client | undefined;
  const notifier = createTransitionNotifier(() => client, log);
  // Startup-race tests end the agent with SIGKILL at a chosen point of a start: after the
  // spec is written but before the spawn, or after the spawn but before startShard returns.
  const crashAt = process.env.LLMGW_TEST_CRASH_AT;
  const crash = (where: string) => (): void => {
    log(`LLMGW_TEST_CRASH_AT=${where}: killing this agent with SIGKILL`);
    process.kill(process.pid, 'SIGKILL');
  };
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
    onTransition: (status) => notifier.send(status),
    log,
    passEnv: config.passEnv,
    ...(config.envFile !== undefined ? { envFile: config.envFile } : {}),
    dryRun: config.reconcile === 'dry-run',
    foreignGpuProcesses: config.foreignGpuProcesses,
    checkRevision: createRevisionCheck(revisionPolicy),
  });
  // On real GPUs, the compute processes nvidia-smi lists on the GPUs this agent manages:
  // those it did not start are foreign (reported, their GPUs withheld; killed only in kill mode).
  const gpuProcesses = (): GpuProcess[] => {
    const managed = config.managedGpus ?? host.gpus.map((gpu) => gpu.index);
    return host.computeProcesses
      .filter((process) => process.gpuIndices.some((index) => managed.includes(index)))
      .map((process) => ({ pid: process.pid, gpuIndices: process.gpuIndices, usedMemoryMib: process.usedMemoryMib }));
  };
  // Before anything can start a new engine: adopt what is ours, end what nobody can describe.
  const recovered = await supervisor.recover(gpuProcesses());
  const unidentified: UnidentifiedProcess[] = [...recovered.unidentified];
  // Kills not yet named in a survey: reconciliation's result lists each exactly once.
  let unreportedKills: UnidentifiedProcess[] = [...recovered.unidentified];
  // Foreign processes killed at start (kill mode) stay named in every registration.
  const foreignKilledAtStart = recovered.foreign.filter((f) => f.killed);
  const dry = config.reconcile === 'dry-run' ? ' (dry run: nothing killed)' : '';
  log(
    `recovered: ${recovered.adopted.length} adopted, ${recovered.exited.length} found exited, ${recovered.unidentified.filter((u) => u.killed).length} unidentified killed, ${recovered.foreign.length} foreign on our GPUs${dry}`,
  );

  const admin = await startAdminServer(config.adminAddr, {
    describe: () => describe(),
    logFile: (shardId) => logPath(config.stateDir, shardId),
    tailLines,
  });
  const adminAddress = `${config.adminAddr.replace(/:\d+$/, '')}:${admin.port}`;
  log(`admin API on ${adminAddress} (Describe, TailLogs, gRPC health)`);

  const describe = async () => {
    if (config.gpus === 'real') host = await discoverHost(config);
    const foreign = [...foreignKilledAtStart, ...supervisor.foreignProcesses(gpuProcesses())];
    return buildRegister(config, host, supervisor.list(), unidentified, foreign, adminAddress);
  };
  const survey = async () => {
    if (config.gpus === 'real') host = await discoverHost(config);
    const found = await supervisor.survey(gpuProcesses());
    const named = [...unreportedKills, ...found.unidentified];
    unreportedKills = [];
    return buildRegister(config, host, supervisor.list(), named, [...foreignKilledAtStart, ...found.foreign], adminAddress);
  };

  const { connectionOptions, namespace } = temporalConfig();
  const nodeInput = {
    nodeId: config.nodeId,
    presenceHeartbeatSeconds: config.presenceHeartbeatSeconds,
    lostGraceSeconds: config.lostGraceSeconds,
    reconcileDryRun: config.reconcile === 'dry-run',
    reconcileEverySeconds: config.reconcileEverySeconds,
  };
  const register = async (): Promise<void> => {
    if (!client) return;
    const report = await describe();
    await client.workflow.signalWithStart<typeof nodeWorkflow, [typeof report]>('node', {
      workflowId: nodeWorkflowId(config.nodeId),
      taskQueue: CONTROL_TASK_QUEUE,
      args: [nodeInput],
      signal: registerSignal,
      signalArgs: [report],
    });
    log(`registered with ${nodeWorkflowId(config.nodeId)} (${report.runningShards.length} shards)`);
  };
  const registerSoon = (): void => {
    register().catch((error: unknown) =>
      log(`registration failed (will retry): ${error instanceof Error ? error.message : String(error)}`, 'warn'),
    );
  };

  // Temporal may be down when the agent starts: engines keep running and the agent keeps
  // trying, because nothing about the host depends on the control plane being up.
  // Before any connection: the SDK's logs (and Core's) go through our logger. Not earlier:
  // a Runtime keeps the process alive, and a bad flag or inventory must end the agent.
  installRuntime({ logger });
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

  // If the node workflow is gone (Temporal lost its data) no presence activity comes:
  // the watchdog below registers again, which starts it anew.
  let lastPresence = Date.now();
  const activities = createAgentActivities({
    supervisor,
    describe,
    survey,
    onPresenceStarted: registerSoon,
    presenceSummary: () => {
      lastPresence = Date.now();
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
    if (Date.now() - lastPresence > config.presenceHeartbeatSeconds * 2000) {
      lastPresence = Date.now();
      registerSoon();
    }
  }, 1_000);

  const stop = (signal: string): void => {
    log(`${signal}: shutting down (engines keep running; a restarted agent adopts them)`);
    clearInterval(watchdog);
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
    notifier.close();
    supervisor.close();
    await admin.close();
    await connection.close();
  }
}

/** Which revisions this agent starts; a key file that cannot be read stops the agent now. */
function revisionPolicyOf(config: AgentConfig, log: LineLog): RevisionPolicy {
  if (config.catalogKey !== undefined) {
    const keys = readCatalogKeys(config.catalogKey);
    for (const warning of keyFileWarnings(config.catalogKey)) log(warning, 'warn');
    log(
      `catalog key(s) ${keys.all.map((k) => k.id).join(', ')} from ${config.catalogKey}: only revisions the control worker signed start here`,
    );
    return { kind: 'keys', file: config.catalogKey };
  }
  if (config.insecureUnsigned) {
    log('--insecure-unsigned: starting revisions nobody signed; anyone who can start a workflow can run anything on this host', 'warn');
    return { kind: 'insecure-unsigned' };
  }
  log(
    'no catalog key (--catalog-key FILE or LLMGW_CATALOG_KEY_FILE): this agent adopts and reports, but starts no engine (see docs/security.md)',
    'warn',
  );
  return { kind: 'no-key' };
}

export type { AgentConfig };
