// Builds the agent's report of its host (Register): inventory and health from
// discovery, the shards the supervisor runs, and what it could not identify.
import { create } from '@bufbuild/protobuf';
import { hostname } from 'node:os';
import { RegisterSchema, type Register, type UnidentifiedProcess } from '../proto/gen/llmgw/v1/register_pb.js';
import type { RunningShard } from '../proto/gen/llmgw/v1/shard_pb.js';
import type { DiscoveredHost } from './discovery/inventory.js';
import type { AgentConfig } from './config.js';
import { gpuSource } from './host.js';

export const AGENT_VERSION = '0.1.0';

export function buildRegister(
  config: AgentConfig,
  host: DiscoveredHost,
  shards: RunningShard[],
  unidentified: UnidentifiedProcess[],
  adminAddress: string,
): Register {
  return create(RegisterSchema, {
    nodeId: config.nodeId,
    hostname: hostname(),
    managementAddress: config.advertiseAddr,
    labels: config.labels,
    agentVersion: AGENT_VERSION,
    engineVersions: host.cudaVersion ? { cuda: host.cudaVersion, driver: host.driverVersion ?? '' } : {},
    gpus: host.gpus,
    fabrics: host.fabrics,
    runningShards: shards,
    problems: host.problems,
    unidentified,
    adminAddress,
    gpuSource: gpuSource(config),
    managedGpus: config.managedGpus ?? host.gpus.map((gpu) => gpu.index),
    gpuClass: host.gpuClass,
    reportedAt: new Date().toISOString(),
  });
}
