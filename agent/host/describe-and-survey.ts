// The agent's reports of its host: `describe` (registrations, the admin API) and `survey`
// (reconciliation's, which first acts on what no spec describes), built from a fresh
// discovery on real GPUs, the supervisor's shards and the processes it judged. Agent side.
import type { ForeignProcess, Register, UnidentifiedProcess } from '../../proto/gen/llmgw/v1/register_pb.js';
import type { AgentConfig } from '../config.js';
import type { DiscoveredHost } from '../discovery/inventory.js';
import { discoverHost } from '../discovery/discover-host.js';
import type { AgentView } from '../metrics.js';
import { buildRegister } from './register-message.js';
import { gpuUsedMib, simulatedLedgerDir } from '../../common/sim-gpu-ledger.js';
import { ShardState, type RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { createSleepActivities, startsAbleToSleep } from '../sleep.js';
import type { GpuProcess } from '../supervisor/recovery/strangers.js';
import type { RecoveryReport, Supervisor } from '../supervisor/supervisor.js';

/** The compute processes nvidia-smi lists on the GPUs this agent manages (none when simulated). */
export function gpuProcessesOf(config: AgentConfig, host: DiscoveredHost): GpuProcess[] {
  const managed = config.managedGpus ?? host.gpus.map((gpu) => gpu.index);
  return host.computeProcesses
    .filter((process) => process.gpuIndices.some((index) => managed.includes(index)))
    .map((process) => ({ pid: process.pid, gpuIndices: process.gpuIndices, usedMemoryMib: process.usedMemoryMib }));
}

export interface HostReports {
  describe(): Promise<Register>;
  survey(): Promise<Register>;
  /** The latest inventory (refreshed by each report on real GPUs). */
  host(): DiscoveredHost;
  /** What the metrics' gauges show. */
  view(): AgentView;
}

export function createHostReports(deps: {
  config: AgentConfig;
  supervisor: Supervisor;
  host: DiscoveredHost;
  recovered: RecoveryReport;
  /** Known once the admin server listens (reports are only asked for after that). */
  adminAddress: () => string;
}): HostReports {
  const { config, supervisor, recovered, adminAddress } = deps;
  let host = deps.host;
  // Recovery's findings are named in every registration; a survey names each kill once.
  const unidentified: UnidentifiedProcess[] = [...recovered.unidentified];
  let unreportedKills: UnidentifiedProcess[] = [...recovered.unidentified];
  // Foreign processes killed at start (kill mode) stay named in every registration.
  const foreignKilledAtStart = recovered.foreign.filter((f) => f.killed);
  let foreign: ForeignProcess[] = [...recovered.foreign];

  const refresh = async (): Promise<void> => {
    if (config.gpus === 'real') host = await discoverHost(config);
    else host = withSimulatedUse(deps.host, simulatedLedgerDir(config.stateDir));
  };
  return {
    async describe() {
      await refresh();
      foreign = [...foreignKilledAtStart, ...supervisor.foreignProcesses(gpuProcessesOf(config, host))];
      return buildRegister(config, host, await runningWithSleep(supervisor), unidentified, foreign, adminAddress());
    },
    async survey() {
      await refresh();
      const found = await supervisor.survey(gpuProcessesOf(config, host));
      const named = [...unreportedKills, ...found.unidentified];
      unreportedKills = [];
      foreign = [...foreignKilledAtStart, ...found.foreign];
      return buildRegister(config, host, await runningWithSleep(supervisor), named, foreign, adminAddress());
    },
    host: () => host,
    view: () => ({
      shards: supervisor.list(),
      gpus: host.gpus,
      managedGpus: config.managedGpus ?? host.gpus.map((gpu) => gpu.index),
      foreign,
    }),
  };
}

/** A simulated host with each GPU's memory used as its engines hold it now (sleepers hold none). */
function withSimulatedUse(host: DiscoveredHost, ledgerDir: string): DiscoveredHost {
  return {
    ...host,
    gpus: host.gpus.map((gpu) => {
      const used = gpuUsedMib(ledgerDir, gpu.index);
      return used === undefined ? gpu : { ...gpu, memoryUsedMib: used };
    }),
  };
}

/**
 * The running shards, each engine able to sleep asked whether it does: adoption after an agent
 * restart (and reconciliation) must rebuild a sleeping replica as sleeping, not wake it.
 */
export async function runningWithSleep(supervisor: Supervisor): Promise<RunningShard[]> {
  const shards = supervisor.list();
  const sleep = createSleepActivities(supervisor);
  await Promise.all(
    shards.map(async (shard) => {
      const spec = shard.spec;
      if (!spec || shard.status?.state !== ShardState.READY || !startsAbleToSleep(spec)) return;
      try {
        shard.sleeping = (await sleep.shardSleepState({ shardId: spec.shardId })).sleeping;
      } catch {
        // Not answering now (loading, or gone): the report says nothing of its sleep.
      }
    }),
  );
  return shards;
}
