// Builds the agent's report of its host (Register): inventory and health from
// discovery, the shards the supervisor runs, what it could not identify, and the foreign
// processes on its GPUs (whose GPUs it reports with a problem, so placement skips them).
import { clone, create } from '@bufbuild/protobuf';
import { hostname } from 'node:os';
import { GPUSchema, GpuHealthSchema, type GPU } from '../../proto/gen/llmgw/v1/gpu_pb.js';
import { RegisterSchema, type ForeignProcess, type Register, type UnidentifiedProcess } from '../../proto/gen/llmgw/v1/register_pb.js';
import type { RunningShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { DiscoveredHost } from '../discovery/inventory.js';
import type { AgentConfig } from '../config.js';
import { gpuSource } from '../discovery/discover-host.js';

export const AGENT_VERSION = '0.1.0';

export function buildRegister(
  config: AgentConfig,
  host: DiscoveredHost,
  shards: RunningShard[],
  unidentified: UnidentifiedProcess[],
  foreign: ForeignProcess[],
  adminAddress: string,
): Register {
  return create(RegisterSchema, {
    nodeId: config.nodeId,
    hostname: hostname(),
    managementAddress: config.advertiseAddr,
    labels: config.labels,
    agentVersion: AGENT_VERSION,
    engineVersions: host.cudaVersion ? { cuda: host.cudaVersion, driver: host.driverVersion ?? '' } : {},
    gpus: withForeignProblems(host.gpus, foreign),
    fabrics: host.fabrics,
    runningShards: shards,
    problems: host.problems,
    unidentified,
    foreignProcesses: foreign,
    adminAddress,
    gpuSource: gpuSource(config),
    managedGpus: config.managedGpus ?? host.gpus.map((gpu) => gpu.index),
    gpuClass: host.gpuClass,
    reportedAt: new Date().toISOString(),
  });
}

/**
 * A GPU a foreign process computes on is not free, whatever the node's allocations say: it is
 * reported with a problem, which placement already honours (a GPU with problems is never
 * handed out). The problem goes when the process does.
 */
export function withForeignProblems(gpus: GPU[], foreign: ForeignProcess[]): GPU[] {
  const live = foreign.filter((f) => !f.killed);
  if (live.length === 0) return gpus;
  return gpus.map((gpu) => {
    const holders = live.filter((f) => f.gpuIndices.includes(gpu.index));
    if (holders.length === 0) return gpu;
    const copy = clone(GPUSchema, gpu);
    const health = copy.health ?? create(GpuHealthSchema, {});
    for (const f of holders)
      health.problems.push(`in use by pid ${f.pid} (${f.command}), which llmgw did not start: withheld from placement`);
    copy.health = health;
    return copy;
  });
}
