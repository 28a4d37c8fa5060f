// The agent host's engine supervisor, set up from the agent's flags and its discovered host,
// and its first act: recovery, before anything can start a new engine. Agent side.
import { availableParallelism } from 'node:os';
import { chmodSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { simulatedLedgerDir, writeGpuTotal } from '../../common/sim-gpu-ledger.js';
import type { Client } from '@temporalio/client';
import type { LineLog } from '../../common/logger.js';
import type { ShardStatus } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { AgentConfig } from '../config.js';
import { interfaceOf } from '../discovery/discover-host.js';
import type { DiscoveredHost } from '../discovery/inventory.js';
import { readEngineKey, resolveEngineUids, resolveEngineUser, type EngineUser, type UidRange } from '../engine-identity.js';
import { llamaServerForAgent } from '../engines/llamacpp-binary.js';
import type { AgentMetrics } from '../metrics.js';
import { createRayClientProbe } from '../ray-client.js';
import { createRayWait } from '../ray-wait.js';
import { createRendezvousFirewall } from './rendezvous-firewall.js';
import { createRevisionCheck, type RevisionPolicy } from '../revision-check.js';
import type { Launcher } from '../supervisor/processes/launcher.js';
import { createSupervisor, type RecoveryReport, type Supervisor, type SupervisorOptions } from '../supervisor/supervisor.js';
import { createFilePinCheck } from '../weights/file-pin.js';
import { gpuProcessesOf } from './describe-and-survey.js';

export interface HostSupervisorDeps {
  config: AgentConfig;
  host: DiscoveredHost;
  revisionPolicy: RevisionPolicy;
  /** The agent's Temporal client once connected: the ticket check asks it who sent a start. */
  temporalClient: () => Client | undefined;
  onTransition(status: ShardStatus): void;
  log: LineLog;
  launcher?: Launcher;
  metrics?: AgentMetrics;
  spawnHooks?: Pick<SupervisorOptions, 'beforeSpawn' | 'afterSpawn'>;
}

export async function createHostSupervisor(deps: HostSupervisorDeps): Promise<Supervisor> {
  const { config, host, log } = deps;
  const managedGpus = config.managedGpus ?? host.gpus.map((gpu) => gpu.index);
  const simulatedGpuLedger = config.gpus === 'real' ? undefined : simulatedLedger(config, host);
  return createSupervisor({
    ...deps.spawnHooks,
    ...(deps.launcher ? { launcher: deps.launcher } : {}),
    nodeId: config.nodeId,
    stateDir: config.stateDir,
    portRange: config.portRange,
    ...(config.portClaimsDir !== undefined ? { portClaimsDir: config.portClaimsDir } : {}),
    managedGpus,
    advertiseAddress: config.advertiseAddr,
    engineContext: {
      fakeEngineCommand: config.fakeEngineCommand,
      rayCommand: [config.rayCommand],
      rayWorkerPorts: config.rayWorkerPorts,
      managementInterface: interfaceOf(config.advertiseAddr),
      weightsDir: config.weightsDir,
      ...(await llamaServerForAgent(log)),
      hostCpus: availableParallelism(),
      hostGpus: managedGpus.length,
      ...(simulatedGpuLedger !== undefined ? { simulatedGpuLedger } : {}),
    },
    // Rank 0 of a Ray launch starts its engine only once `ray status` shows every node.
    waitForRay: createRayWait({ rayCommand: [config.rayCommand], log }),
    // Every port of a Ray shard is pinned in a block of its own, the Ray Client's too where this
    // host's Ray has it (asked once, at the first Ray head; virtual engines run no Ray to ask).
    rayPortsPerShard: config.rayPortsPerShard,
    ...(deps.launcher ? {} : { rayHasClient: createRayClientProbe([config.rayCommand], log) }),
    // Rank 0's rendezvous port (Ray's head, SGLang's dist-init) admits the placement's peers
    // only. Not for a launcher of virtual engines (sim-fleet): nothing of theirs listens.
    ...(deps.launcher ? {} : { rendezvousFirewall: createRendezvousFirewall(config.nodeId, log) }),
    onTransition: deps.onTransition,
    log,
    passEnv: config.passEnv,
    maxLogBytes: config.maxLogSize,
    logRetentionMs: config.logRetention,
    ...(config.envFile !== undefined ? { envFile: config.envFile } : {}),
    ...engineIdentity(config, log),
    ...engineTls(config, log),
    dryRun: config.reconcile === 'dry-run',
    foreignGpuProcesses: config.foreignGpuProcesses,
    checkRevision: createRevisionCheck(deps.revisionPolicy, { ownAddress: config.advertiseAddr, client: deps.temporalClient }),
    checkPinnedFiles: createFilePinCheck(),
    count: (event) => deps.metrics?.count(event),
  });
}

/**
 * Before anything can start a new engine: adopt what is ours, end what nobody can describe,
 * and sort out the compute processes on our GPUs that are not ours.
 */
export async function recoverHost(
  config: AgentConfig,
  supervisor: Supervisor,
  host: DiscoveredHost,
  log: LineLog,
): Promise<RecoveryReport> {
  const recovered = await supervisor.recover(gpuProcessesOf(config, host));
  const dry = config.reconcile === 'dry-run' ? ' (dry run: nothing killed)' : '';
  const killed = recovered.unidentified.filter((u) => u.killed).length;
  log(
    `recovered: ${recovered.adopted.length} adopted, ${recovered.exited.length} found exited, ${killed} unidentified killed, ${recovered.foreign.length} foreign on our GPUs${dry}`,
  );
  return recovered;
}

/** --engine-tls, said once at start: an operator reading the log learns how engines are reached. */
function engineTls(config: AgentConfig, log: LineLog): { engineTls?: boolean } {
  if (!config.engineTls) return {};
  log('engines serve HTTPS with a certificate this agent issues for each start (--engine-tls); llama.cpp profiles are refused');
  return { engineTls: true };
}

/** Who engines run as and the key file they require, checked now: a bad user or key file stops the agent. */
function engineIdentity(config: AgentConfig, log: LineLog): { engineUser?: EngineUser; engineUids?: UidRange; engineKeyFile?: string } {
  const engineUser = resolveEngineUser(config.engineUser, log);
  const engineUids = resolveEngineUids(config.engineUidRange, engineUser, log);
  log(
    engineUser
      ? engineUids
        ? `engines run as a uid of their own each, from ${engineUids.from}-${engineUids.to}, in ${engineUser.name}'s group (gid ${engineUser.gid})`
        : `engines run as ${engineUser.name} (uid ${engineUser.uid})`
      : "engines run as this agent's user",
  );
  const identity = { ...(engineUser ? { engineUser } : {}), ...(engineUids ? { engineUids } : {}) };
  if (config.engineKeyFile === undefined) return identity;
  readEngineKey(config.engineKeyFile);
  log(`engines require the API key in ${config.engineKeyFile}`);
  return { ...identity, engineKeyFile: config.engineKeyFile };
}

function simulatedLedger(config: AgentConfig, host: DiscoveredHost): string {
  const dir = simulatedLedgerDir(config.stateDir);
  mkdirSync(dir, { recursive: true });
  // Engines run as their own users (host-safety.md) and each writes its entry here. A simulated
  // host only: nothing real is accounted, so any local user writing here fakes only a simulation.
  chmodSync(dir, 0o777);
  for (const gpu of host.gpus) {
    writeGpuTotal(dir, gpu.index, gpu.memoryTotalMib, gpu.memoryUsedMib);
    chmodSync(join(dir, `gpu-${gpu.index}`), 0o777);
  }
  return dir;
}
