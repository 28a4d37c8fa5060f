// The one place where an agent's Register (the wire) becomes the node workflow's
// NodeInventory (the domain). Safe to import from workflows.
import type { Register } from '../proto/gen/llmgw/v1/register_pb.js';
import type { NodeInventory } from './node-types.js';

export function inventoryFromRegister(register: Register): NodeInventory {
  const gpus = register.gpus.map((gpu) => ({
    index: gpu.index,
    uuid: gpu.uuid,
    name: gpu.name,
    memoryTotalMib: gpu.memoryTotalMib,
    memoryUsedMib: gpu.memoryUsedMib,
    numaNode: gpu.numaNode,
    nvlinkPeers: gpu.nvlinkPeers.map((peer) => peer.index),
    nearHcas: [...gpu.nearHcas],
    problems: [...(gpu.health?.problems ?? [])],
  }));
  return {
    nodeId: register.nodeId,
    hostname: register.hostname,
    managementAddress: register.managementAddress,
    adminAddress: register.adminAddress,
    labels: { ...register.labels },
    gpuClass: register.gpuClass,
    gpus,
    managedGpus: register.managedGpus.length ? [...register.managedGpus] : gpus.map((gpu) => gpu.index),
    fabrics: register.fabrics.map((fabric) => ({
      fabric: fabric.fabric,
      hcas: fabric.hcas.map((hca) => hca.name),
      rateGbps: fabric.rateGbps,
    })),
    problems: [...register.problems],
    foreignProcesses: register.foreignProcesses.map((f) => ({
      pid: f.pid,
      gpuIndices: [...f.gpuIndices],
      command: f.command,
      usedMemoryMib: f.usedMemoryMib,
      killed: f.killed,
      note: f.note,
    })),
    agentVersion: register.agentVersion,
    gpuSource: register.gpuSource,
    reportedAt: register.reportedAt,
  };
}
