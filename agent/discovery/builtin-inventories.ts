// The built-in simulated hosts (`builtin:h100x8`, `builtin:a100x8`, `builtin:l40sx4`),
// shaped like the fixture hosts, so a development agent needs no inventory file.
import type { SimulatedInventory } from './simulated.js';

type Gpu = SimulatedInventory['gpus'][number];

function allToAll(count: number, index: number, links: number): { index: number; links: number }[] {
  return Array.from({ length: count }, (_, peer) => peer)
    .filter((peer) => peer !== index)
    .map((peer) => ({ index: peer, links }));
}

const H100_BUS = ['18', '2A', '3A', '5D', '9A', 'AB', 'BA', 'DB'];
const A100_BUS = ['01', '25', '41', '61', '81', 'A1', 'C1', 'E1'];
const L40S_BUS = ['17', '31', 'B1', 'CA'];

function busId(bus: string | undefined): string {
  return `00000000:${bus ?? '00'}:00.0`;
}

/** One card per bus id, numbered in bus order; `more` adds what differs by position (NUMA, links). */
function cards(
  buses: string[],
  card: Pick<Gpu, 'name' | 'memoryTotalMib' | 'computeCapability'>,
  more: (index: number) => Omit<Gpu, 'index' | 'name' | 'memoryTotalMib' | 'computeCapability' | 'pciBusId'>,
): Gpu[] {
  return buses.map((bus, index) => ({ index, ...card, pciBusId: busId(bus), ...more(index) }));
}

/** 8× H100 SXM, every pair joined by 18 NVLinks; one 400 Gb/s HCA beside each GPU, two Ethernet ports. */
function h100x8(): SimulatedInventory {
  const gpus = cards(H100_BUS, { name: 'NVIDIA H100 80GB HBM3', memoryTotalMib: 81559, computeCapability: '9.0' }, (index) => ({
    numaNode: index < 4 ? 0 : 1,
    nvlinkPeers: allToAll(8, index, 18),
    nearHcas: [`mlx5_${index}`],
  }));
  const hcas: NonNullable<SimulatedInventory['hcas']> = [
    ...H100_BUS.map((_, i) => ({
      name: `mlx5_${i}`,
      rateGbps: 400,
      numaNode: i < 4 ? 0 : 1,
      linkLayer: 'InfiniBand' as const,
      state: 'ACTIVE' as const,
    })),
    { name: 'mlx5_8', rateGbps: 200, numaNode: 0, linkLayer: 'Ethernet', state: 'ACTIVE' },
    { name: 'mlx5_9', rateGbps: 200, numaNode: 1, linkLayer: 'Ethernet', state: 'ACTIVE' },
  ];
  return { gpuClass: 'H100', cudaVersion: '12.4', driverVersion: '550.54.15', gpus, hcas };
}

/** 8× A100 PCIe, NVLink bridges joining 0–1, 2–3, 4–5, 6–7; no InfiniBand. */
function a100x8(): SimulatedInventory {
  const gpus = cards(A100_BUS, { name: 'NVIDIA A100 80GB PCIe', memoryTotalMib: 81920, computeCapability: '8.0' }, (index) => ({
    numaNode: index < 4 ? 0 : 1,
    // The bridge partner of an even GPU is the next one, of an odd GPU the one before.
    nvlinkPeers: [{ index: index ^ 1, links: 12 }],
  }));
  return { gpuClass: 'A100', cudaVersion: '12.2', driverVersion: '535.161.08', gpus };
}

/** 4× L40S on one NUMA node; no NVLink, no InfiniBand. */
function l40sx4(): SimulatedInventory {
  const gpus = cards(L40S_BUS, { name: 'NVIDIA L40S', memoryTotalMib: 46068, computeCapability: '8.9' }, () => ({ numaNode: 0 }));
  return { gpuClass: 'L40S', cudaVersion: '12.4', driverVersion: '550.90.07', gpus };
}

export const BUILTIN_INVENTORIES = { h100x8, a100x8, l40sx4 } as const;

export type BuiltinName = keyof typeof BUILTIN_INVENTORIES;

export function isBuiltinName(name: string): name is BuiltinName {
  return Object.hasOwn(BUILTIN_INVENTORIES, name);
}
