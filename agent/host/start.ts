// One agent host: everything `llmgw agent` does for its host above the process spawn —
// discovery, recovery (adoption), the admin API, registration, presence and the node-local
// activities on `agent/<nodeId>`. Agent side. `llmgw agent` runs one over child processes;
// `llmgw sim-fleet` runs many in one process over virtual engines (sim/), each given its own
// Temporal connection so that killing one looks to Temporal like a dead host. This file wires
// the parts, each in its own file beside it, in the order a host comes up.
import type { Client } from '@temporalio/client';
import type { NativeConnection } from '@temporalio/worker';
import { agentTaskQueue } from '../../common/names.js';
import { lineLog, type Logger } from '../../common/logger.js';
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import type { AgentConfig } from '../config.js';
import { discoverHost } from '../discovery/discover-host.js';
import { startAgentGpuHealth } from '../gpu-health.js';
import type { AgentMetrics } from '../metrics.js';
import { preflight } from '../preflight.js';
import type { Launcher } from '../supervisor/processes/launcher.js';
import type { SupervisorOptions } from '../supervisor/supervisor.js';
import { startHostAdmin } from './admin.js';
import { createHostReports } from './describe-and-survey.js';
import { createNodeSignals } from './node-signals.js';
import { createReportSigner } from '../report-signer.js';
import { createRegistration } from './registration.js';
import { loadAgentIdentity } from './identity.js';
import { createEndpointAttester, createRendezvousAttester } from '../endpoint-attester.js';
import { createHostSupervisor, recoverHost } from './supervisor.js';
import { createHostWorker } from './worker.js';

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
  const { config } = deps;
  const log = lineLog(deps.logger);
  const revisionPolicy = preflight(config, log);
  const { identity, sign } = loadAgentIdentity(config, log);
  const host = await discoverHost(config);
  const problems = host.problems.length ? `; problems: ${host.problems.join('; ')}` : '';
  log(`host: ${host.gpus.length}× ${host.gpuClass || 'no GPU'}${problems}`);

  const reportSigner = createReportSigner(identity, config.nodeId);
  const signals = createNodeSignals(config.nodeId, log, reportSigner.weights);
  const supervisor = await createHostSupervisor({
    ...deps,
    host,
    revisionPolicy,
    temporalClient: () => signals.client(),
    onTransition: signals.transition,
    log,
  });
  const recovered = await recoverHost(config, supervisor, host, log);
  let adminAddress = '';
  const hostReports = createHostReports({ config, supervisor, host, recovered, adminAddress: () => adminAddress });
  // Faults found while engines run hold a GPU out of every report (agent/gpu-health.ts).
  const gpuHealth = startAgentGpuHealth(config, host, supervisor, () => registration.soon(), signals.notify, log);
  const describe = async (): Promise<Register> => gpuHealth.withFaults(await hostReports.describe());
  const survey = async (): Promise<Register> => gpuHealth.withFaults(await hostReports.survey());
  const admin = await startHostAdmin(config, async () => reportSigner.shards(await describe()), log);
  adminAddress = admin.address;
  const observe = (): void => deps.metrics?.observe(hostReports.view());
  const gauges = setInterval(observe, 5_000);
  gauges.unref();
  observe();
  const registration = createRegistration(config, signals, describe, log, sign);

  // What the host holds besides its worker: let go once the worker stops, or Temporal never answers.
  const release = async (): Promise<void> => {
    signals.close();
    supervisor.close();
    await admin.close();
  };
  let link: TemporalLink;
  try {
    link = await deps.temporal();
  } catch (error) {
    clearInterval(gauges);
    await release();
    throw error;
  }
  signals.connect(link.client);
  await registration.decidePresence(link.client);
  // What reconciliation acts on is signed for the run that asked (agent/report-signer.ts).
  const reports = {
    ...hostReports,
    describe: async () => reportSigner.shards(await describe()),
    survey: async () => reportSigner.shards(await survey()),
  };
  const attestEndpoint = createEndpointAttester(
    identity,
    {
      nodeId: config.nodeId,
      address: config.advertiseAddr,
      client: () => signals.client(),
      tlsFingerprint: (shardId) => supervisor.tlsFingerprint(shardId),
    },
    log,
  );
  const served = await createHostWorker({
    ...deps,
    ...link,
    supervisor,
    gpuHealth,
    reports,
    signals,
    registration,
    log,
    revisionPolicy,
    attestEndpoint,
    attestRendezvous: createRendezvousAttester(identity, { nodeId: config.nodeId, address: config.advertiseAddr }),
  });
  registration.soon();
  registration.watch();

  const done = served.worker.run().finally(async () => {
    served.close();
    await release();
  });
  // Timers end, and the worker stops polling; engines run on.
  const end = (): void => {
    registration.quiet();
    clearInterval(gauges);
    if (served.worker.getState() === 'RUNNING') served.worker.shutdown();
  };
  const { from, to } = config.portRange;
  log(`serving ${agentTaskQueue(config.nodeId)}; state dir ${config.stateDir}; engine ports ${from}-${to}`);
  let dead = false;
  return {
    nodeId: config.nodeId,
    done,
    stop(reason) {
      if (dead) return;
      signals.stopping(reason);
      end();
    },
    kill() {
      if (dead) return;
      dead = true;
      signals.kill();
      // Engines are the launcher's to end (a dead host takes them along, a dead agent does not).
      supervisor.close();
      end();
    },
  };
}
