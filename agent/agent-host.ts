// One agent host: everything `llmgw agent` does for its host above the process spawn —
// discovery, recovery (adoption), the admin API, registration, presence and the node-local
// activities on `agent/<nodeId>`. Agent side. `llmgw agent` runs one over child processes;
// `llmgw sim-fleet` runs many in one process over virtual engines (sim/), each given its own
// Temporal connection so that killing one looks to Temporal like a dead host.
import type { Client } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { agentTaskQueue, CONTROL_TASK_QUEUE, nodeWorkflowId } from '../common/names.js';
import { lineLog, type LineLog, type Logger } from '../common/logger.js';
import { llmgwDataConverter } from '../temporal/connection.js';
import { agentStoppingSignal, registerSignal, runningShardsSignal, weightsHeldSignal } from '../workflows/definitions.js';
import type { node as nodeWorkflow } from '../workflows/node/workflow.js';
import type { AgentSettings } from '../common/node-types.js';
import type { AgentConfig } from './config.js';
import { discoverHost, interfaceOf } from './host.js';
import { createAgentActivities } from './activities.js';
import { createTransitionNotifier } from './notifier.js';
import { createDrainer } from './drain.js';
import { presenceHeartbeatFor, SHORT_PRESENCE_SECONDS, watchNodeWorkflow } from './presence.js';
import { createShardReporter, runningShardIds, type ShardReporter } from './shard-report.js';
import { join } from 'node:path';
import { ADMIN_TOKEN_FILE, adminToken, isUnixAddress, resolveAdminAddress } from './admin/auth.js';
import { startAdminServer } from './admin/server.js';
import { createSupervisor, type SupervisorOptions } from './supervisor/supervisor.js';
import type { Launcher } from './supervisor/launcher.js';
import { createRayWait } from './ray-wait.js';
import { logPath } from './supervisor/spec-store.js';
import { tailLines } from './supervisor/logs.js';
import { resolveEngineUser, readEngineKey, type EngineUser } from './engine-identity.js';
import { createRevisionCheck } from './revision-check.js';
import { preflight } from './preflight.js';
import { createHostReports, gpuProcessesOf } from './reports.js';
import { startAgentGpuHealth } from './gpu-health.js';
import type { Register } from '../proto/gen/llmgw/v1/register_pb.js';
import type { AgentMetrics } from './metrics.js';
import { createHostWeights } from './weights/host-weights.js';
import { createWeightsReporter, heldWeightsOf, type WeightsReporter } from './weights/weights-report.js';

/** Temporal as the host reaches it: the worker's connection and a client for signals. */
export interface TemporalLink {
  connection: NativeConnection;
  client: Client;
  namespace: string;
}

export interface AgentHostDeps {
  config: AgentConfig;
  /**
   * Resolves once Temporal is reachable. Asked only after recovery and the admin API: engines
   * keep running, and the host keeps its promises, while the control plane is down.
   */
  temporal: () => Promise<TemporalLink>;
  /** How engines are started and seen (default: real child processes and /proc). */
  launcher?: Launcher;
  logger: Logger;
  metrics?: AgentMetrics;
  /** Test hooks around each spawn (see SupervisorOptions). */
  spawnHooks?: Pick<SupervisorOptions, 'beforeSpawn' | 'afterSpawn'>;
  /** Activity pollers of the host's worker (the SDK's default when unset); a fleet of hundreds needs few. */
  activityPollers?: number;
}

export interface AgentHost {
  nodeId: string;
  /** Resolves once the host's worker has stopped (after stop() or kill()); rejects if it failed. */
  done: Promise<void>;
  /** An operator's stop: the node workflow is told (NotReady now), the worker shut down; engines run on. */
  stop(reason: string): void;
  /**
   * Death: timers, watching and the worker end here without a word to Temporal. The caller
   * cuts the host's connection first, so that nothing (not even the worker's shutdown) reaches it.
   */
  kill(): void;
}

export async function startAgentHost(deps: AgentHostDeps): Promise<AgentHost> {
  const { config, logger } = deps;
  const log = lineLog(logger);
  const revisionPolicy = preflight(config, log);
  const discovered = await discoverHost(config);
  log(
    `host: ${discovered.gpus.length}× ${discovered.gpuClass || 'no GPU'}${discovered.problems.length ? `; problems: ${discovered.problems.join('; ')}` : ''}`,
  );

  let client: Client | undefined = undefined;
  let dead = false;
  // A dead host says nothing more: its signals stop with it.
  const notifier = createTransitionNotifier(() => (dead ? undefined : client), log);
  // Told of every transition; created once the host reports are ready (below).
  // eslint-disable-next-line prefer-const -- assigned below; transitions may fire before
  let shardReporter: ShardReporter | undefined;
  // eslint-disable-next-line prefer-const -- assigned below; transitions may fire before
  let weightsReporter: WeightsReporter | undefined;
  const supervisor = createSupervisor({
    ...deps.spawnHooks,
    ...(deps.launcher ? { launcher: deps.launcher } : {}),
    nodeId: config.nodeId,
    stateDir: config.stateDir,
    portRange: config.portRange,
    ...(config.portClaimsDir !== undefined ? { portClaimsDir: config.portClaimsDir } : {}),
    managedGpus: config.managedGpus ?? discovered.gpus.map((gpu) => gpu.index),
    advertiseAddress: config.advertiseAddr,
    engineContext: {
      fakeEngineCommand: config.fakeEngineCommand,
      rayCommand: [config.rayCommand],
      rayWorkerPorts: config.rayWorkerPorts,
      managementInterface: interfaceOf(config.advertiseAddr),
      weightsDir: config.weightsDir,
    },
    // Rank 0 of a Ray launch starts its engine only once `ray status` shows every node.
    waitForRay: createRayWait({ rayCommand: [config.rayCommand], log }),
    onTransition: (status) => {
      notifier.send(status);
      shardReporter?.changed();
      weightsReporter?.changed();
    },
    log,
    passEnv: config.passEnv,
    maxLogBytes: config.maxLogSize,
    logRetentionMs: config.logRetention,
    ...(config.envFile !== undefined ? { envFile: config.envFile } : {}),
    ...engineIdentity(config, log),
    dryRun: config.reconcile === 'dry-run',
    foreignGpuProcesses: config.foreignGpuProcesses,
    checkRevision: createRevisionCheck(revisionPolicy),
    count: (event) => deps.metrics?.count(event),
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
  // Faults found while engines run hold a GPU out of every report (agent/gpu-health.ts).
  const gpuHealth = startAgentGpuHealth(
    config,
    discovered,
    supervisor,
    () => registerSoon(),
    (status) => notifier.send(status),
    log,
  );
  const describe = async (): Promise<Register> => gpuHealth.withFaults(await hostReports.describe());
  const survey = async (): Promise<Register> => gpuHealth.withFaults(await hostReports.survey());
  // A Unix socket (the default) is guarded by its mode; TCP by the token in the state dir.
  const adminAddr = resolveAdminAddress(config.adminAddr, config.stateDir);
  const admin = await startAdminServer(
    adminAddr,
    { describe, logFile: (shardId) => logPath(config.stateDir, shardId), tailLines },
    isUnixAddress(adminAddr) ? undefined : adminToken(config.stateDir),
  );
  adminAddress = admin.address;
  const guard = isUnixAddress(adminAddr) ? 'socket mode 0600' : `token in ${join(config.stateDir, ADMIN_TOKEN_FILE)}`;
  log(`admin API on ${adminAddress} (Describe, TailLogs, gRPC health; ${guard})`);
  const observe = (): void => deps.metrics?.observe(hostReports.view());
  const gauges = setInterval(observe, 5_000);
  gauges.unref();
  observe();

  shardReporter = createShardReporter({
    list: () => supervisor.list(),
    send: async (shardIds) => {
      if (dead) return;
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
    if (!client || dead) return;
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
    weightsReporter?.registered();
    log(`registered with ${nodeWorkflowId(config.nodeId)} (${report.runningShards.length} shards)`);
  };
  const registerSoon = (): void => {
    register().catch((error: unknown) =>
      log(`registration failed (will retry): ${error instanceof Error ? error.message : String(error)}`, 'warn'),
    );
  };

  let link: TemporalLink;
  try {
    link = await deps.temporal();
  } catch (error) {
    clearInterval(gauges);
    shardReporter.close();
    notifier.close();
    supervisor.close();
    await admin.close();
    throw error;
  }
  client = link.client;
  nodeInput.presenceHeartbeatSeconds = await presenceHeartbeatFor(config.presenceHeartbeatSeconds, client);
  log(
    `presence heartbeat ${nodeInput.presenceHeartbeatSeconds} s${config.presenceHeartbeatSeconds === undefined ? ' (worker heartbeats watch this agent; see workers/liveness.ts)' : ''}`,
  );

  // If the node workflow is gone (Temporal lost its data) no presence activity comes:
  // the watchdog below registers again, which starts it anew.
  let lastPresence = Date.now();
  const drainer = createDrainer({ statusOf: (shardId) => supervisor.status(shardId), send: (status) => notifier.send(status), log });
  const activities = createAgentActivities({
    supervisor,
    gpuHealth: {
      refusal: (gpuIndices) => gpuHealth.refusal(gpuIndices),
      clear: (index) => {
        const cleared = gpuHealth.clear(index);
        if (cleared) registerSoon();
        return cleared;
      },
    },
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
  const weights = createHostWeights(
    config,
    () => supervisor.list(),
    log,
    () => weightsReporter?.changed(),
  );
  weightsReporter = createWeightsReporter({
    held: () => heldWeightsOf(weights.cache, supervisor.list()),
    send: async (held) => {
      if (dead) return;
      await client?.workflow
        .getHandle(nodeWorkflowId(config.nodeId))
        .signal(weightsHeldSignal, { weights: held, at: new Date().toISOString() });
    },
    log: (line) => log(line, 'warn'),
  });
  const worker = await Worker.create({
    connection: link.connection,
    namespace: link.namespace,
    taskQueue: agentTaskQueue(config.nodeId),
    activities: { ...activities, ...weights.activities },
    dataConverter: llmgwDataConverter(),
    // Presence runs for as long as the agent lives; leave room for engine starts besides.
    maxConcurrentActivityTaskExecutions: 200,
    ...(deps.activityPollers ? { maxConcurrentActivityTaskPolls: deps.activityPollers } : {}),
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
  const nodeWatch = watchNodeWorkflow(() => (dead ? undefined : client), nodeWorkflowId(config.nodeId), registerSoon);

  const done = (async () => {
    try {
      await worker.run();
    } finally {
      drainer.close();
      shardReporter?.close();
      weightsReporter?.close();
      notifier.close();
      supervisor.close();
      await admin.close();
    }
  })();
  const quiet = (): void => {
    clearInterval(watchdog);
    nodeWatch.stop();
    clearInterval(gauges);
  };
  log(
    `serving ${agentTaskQueue(config.nodeId)}; state dir ${config.stateDir}; engine ports ${config.portRange.from}-${config.portRange.to}`,
  );
  return {
    nodeId: config.nodeId,
    done,
    stop(reason) {
      if (dead) return;
      quiet();
      // Say so, so the node is NotReady now rather than after a heartbeat timeout.
      void client?.workflow
        .getHandle(nodeWorkflowId(config.nodeId))
        .signal(agentStoppingSignal, { reason })
        .catch(() => undefined);
      if (worker.getState() === 'RUNNING') worker.shutdown();
    },
    kill() {
      if (dead) return;
      dead = true;
      quiet();
      // Engines are the launcher's to end (a dead host takes them along, a dead agent does not).
      supervisor.close();
      if (worker.getState() === 'RUNNING') worker.shutdown();
    },
  };
}

/** Who engines run as and the key file they require, checked now: a bad user or key file stops the agent. */
function engineIdentity(config: AgentConfig, log: LineLog): { engineUser?: EngineUser; engineKeyFile?: string } {
  const engineUser = resolveEngineUser(config.engineUser, log);
  log(engineUser ? `engines run as ${engineUser.name} (uid ${engineUser.uid})` : "engines run as this agent's user");
  if (config.engineKeyFile === undefined) return engineUser ? { engineUser } : {};
  readEngineKey(config.engineKeyFile);
  log(`engines require the API key in ${config.engineKeyFile}`);
  return { ...(engineUser ? { engineUser } : {}), engineKeyFile: config.engineKeyFile };
}
