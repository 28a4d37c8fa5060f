// Combines what the agent read about its host (nvidia-smi rows and topology, sysfs
// HCAs) into the proto messages it reports: GPUs, fabrics, GPU class, foreign processes.
import { create } from '@bufbuild/protobuf';
import {
  FabricAttachmentSchema,
  GPUSchema,
  GpuHealthSchema,
  HcaSchema,
  NvlinkPeerSchema,
  type FabricAttachment,
  type GPU,
  type Hca,
} from '../../proto/gen/llmgw/v1/gpu_pb.js';
import { gpuClassFromName } from './gpu-class.js';
import { DEFAULT_MAX_TEMPERATURE_C, gpuProblems } from './health.js';
import type { ComputeApp, PcieRelation, QueryGpuRow, TopologyGpu } from './nvidia-smi.js';
import type { HcaInfo } from './sysfs.js';

export { gpuClassFromName } from './gpu-class.js';

export const DEFAULT_FABRIC_LABEL = 'ib';

/** What discovery (real or simulated) hands the rest of the agent. */
export interface DiscoveredHost {
  gpus: GPU[];
  fabrics: FabricAttachment[];
  /** Empty when the host has no GPUs. */
  gpuClass: string;
  cudaVersion?: string;
  driverVersion?: string;
  /** Host-level problems; a GPU's own problems are in its health. */
  problems: string[];
  /** Every compute process nvidia-smi lists, by pid, with the GPUs it holds. */
  computeProcesses: ComputeProcess[];
}

export interface ComputeProcess {
  pid: number;
  gpuIndices: number[];
  usedMemoryMib: number;
}

export interface InventoryInputs {
  rows: QueryGpuRow[];
  topology?: TopologyGpu[];
  hcas?: HcaInfo[];
  /** sysfs numa_node by PCI bus id as the rows print it; used where topology has no NUMA affinity. */
  pciNumaNodes?: Record<string, number>;
  cudaVersion?: string;
  driverVersion?: string;
  computeApps?: ComputeApp[];
  /** The agent's `fabric` label: the name of the InfiniBand fabric its HCAs are cabled to. */
  fabricLabel?: string;
  maxTemperatureC?: number;
  /** Set by simulated inventories that name their class; otherwise derived from the GPU name. */
  gpuClass?: string;
}

// PIX and PXB stay below the host bridge, so GPUDirect RDMA between the GPU and the
// HCA does not cross the CPU; PHB and farther do.
function isNear(relation: PcieRelation): boolean {
  switch (relation) {
    case 'PIX':
    case 'PXB':
      return true;
    case 'PHB':
    case 'NODE':
    case 'SYS':
      return false;
  }
}

export function buildInventory(inputs: InventoryInputs): DiscoveredHost {
  const maxTemperatureC = inputs.maxTemperatureC ?? DEFAULT_MAX_TEMPERATURE_C;
  const topology = new Map((inputs.topology ?? []).map((t) => [t.index, t]));
  const rows = [...inputs.rows].sort((a, b) => a.index - b.index);
  const problems: string[] = [];

  const gpus = rows.map((row): GPU => {
    const topo = topology.get(row.index);
    const numaNode = topo?.numaAffinity ?? inputs.pciNumaNodes?.[row.pciBusId] ?? -1;
    return create(GPUSchema, {
      index: row.index,
      uuid: row.uuid,
      name: row.name,
      memoryTotalMib: row.memoryTotalMib,
      memoryUsedMib: row.memoryUsedMib,
      computeCapability: row.computeCapability,
      numaNode,
      pciBusId: row.pciBusId,
      driverVersion: row.driverVersion,
      cudaVersion: inputs.cudaVersion ?? '',
      nvlinkPeers: (topo?.nvlinkPeers ?? []).map((peer) => create(NvlinkPeerSchema, peer)),
      health: create(GpuHealthSchema, {
        uncorrectedEccErrors: row.uncorrectedEcc,
        temperatureC: row.temperatureC,
        problems: gpuProblems(row, { maxTemperatureC }),
      }),
      nearHcas: (topo?.nics ?? []).filter((nic) => isNear(nic.relation)).map((nic) => nic.name),
    });
  });

  const classes = [...new Set(rows.map((row) => gpuClassFromName(row.name)))];
  if (classes.length > 1) {
    // Catalog profiles are per GPU class; one host reports one class, so say that the others are hidden behind it.
    problems.push(`GPUs of more than one class on this host (${classes.join(', ')}); reporting ${classes[0]}`);
  }
  const gpuClass = inputs.gpuClass ?? classes[0] ?? '';

  const computeProcesses = groupComputeApps(inputs.computeApps ?? [], rows, problems);
  const driverVersion = rows.find((row) => row.driverVersion !== '')?.driverVersion ?? inputs.driverVersion;

  const host: DiscoveredHost = {
    gpus,
    fabrics: buildFabrics(inputs.hcas ?? [], inputs.fabricLabel ?? DEFAULT_FABRIC_LABEL),
    gpuClass,
    problems,
    computeProcesses,
  };
  if (inputs.cudaVersion !== undefined) host.cudaVersion = inputs.cudaVersion;
  if (driverVersion !== undefined) host.driverVersion = driverVersion;
  return host;
}

/**
 * One attachment for the host's active InfiniBand HCAs. Ethernet (RoCE) ports on the
 * same mlx5 driver are excluded: they are not cabled to the IB fabric the label names.
 */
export function buildFabrics(hcas: HcaInfo[], fabricLabel: string): FabricAttachment[] {
  const active = hcas.filter((hca) => hca.linkLayer === 'InfiniBand' && hca.state === 'ACTIVE');
  if (active.length === 0) return [];
  const messages: Hca[] = active.map((hca) =>
    create(HcaSchema, {
      name: hca.name,
      rateGbps: Math.floor(hca.rateGbps ?? 0),
      numaNode: hca.numaNode ?? -1,
      linkLayer: hca.linkLayer ?? '',
      state: hca.state ?? '',
    }),
  );
  const known = messages.map((hca) => hca.rateGbps).filter((rate) => rate > 0);
  return [create(FabricAttachmentSchema, { fabric: fabricLabel, hcas: messages, rateGbps: known.length > 0 ? Math.min(...known) : 0 })];
}

function groupComputeApps(apps: ComputeApp[], rows: QueryGpuRow[], problems: string[]): ComputeProcess[] {
  const indexByUuid = new Map(rows.map((row) => [row.uuid, row.index]));
  const byPid = new Map<number, ComputeProcess>();
  for (const app of apps) {
    const index = indexByUuid.get(app.gpuUuid);
    if (index === undefined) {
      // A MIG instance or a GPU that fell off the bus between the two queries.
      problems.push(`process ${app.pid} uses GPU ${app.gpuUuid}, which the GPU list does not show`);
      continue;
    }
    const entry = byPid.get(app.pid) ?? { pid: app.pid, gpuIndices: [], usedMemoryMib: 0 };
    if (!entry.gpuIndices.includes(index)) entry.gpuIndices.push(index);
    entry.usedMemoryMib += app.usedMemoryMib;
    byPid.set(app.pid, entry);
  }
  return [...byPid.values()].map((p) => ({ ...p, gpuIndices: [...p.gpuIndices].sort((a, b) => a - b) })).sort((a, b) => a.pid - b.pid);
}
