// Simulated GPU hosts for development and tests, on the agent's side: an inventory file
// (YAML or JSON) or a built-in one stands in for nvidia-smi and sysfs, and yields what real discovery yields.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { SafeName } from '../../common/safe-name.js';
import { BUILTIN_INVENTORIES, isBuiltinName } from './builtin-inventories.js';
import { buildInventory, type DiscoveredHost } from './inventory.js';
import type { QueryGpuRow, TopologyGpu } from './nvidia-smi.js';

export const BUILTIN_PREFIX = 'builtin:';

// YAML reads an unquoted 9.0 as the number 9, which would lose the ".0" of a version.
const version = z.string({ error: 'expected string such as "9.0" (quote it: unquoted YAML reads it as a number)' });
const uint32 = z.number().int().min(0).max(0xffff_ffff);

export const SimulatedNvlinkPeer = z.object({ index: uint32, links: uint32.min(1) }).strict();

export const SimulatedGpu = z
  .object({
    index: uint32,
    /** Derived from the agent's node id when absent, so two simulated hosts never share one. */
    uuid: z.string().min(1).optional(),
    name: z.string().min(1),
    memoryTotalMib: uint32.min(1),
    memoryUsedMib: uint32.optional(),
    computeCapability: version.optional(),
    numaNode: z.number().int().min(0).optional(),
    pciBusId: z.string().optional(),
    nvlinkPeers: z.array(SimulatedNvlinkPeer).optional(),
    /** HCAs beside this GPU (PIX/PXB in topo -m); each must be listed under `hcas`. */
    nearHcas: z.array(z.string().min(1)).optional(),
    temperatureC: z.number().int().optional(),
    uncorrectedEccErrors: uint32.optional(),
  })
  .strict();

export const SimulatedHca = z
  .object({
    name: z.string().min(1),
    rateGbps: z.number().positive(),
    numaNode: z.number().int().min(0).optional(),
    linkLayer: z.enum(['InfiniBand', 'Ethernet']).optional(),
    state: z.enum(['ACTIVE', 'DOWN', 'INIT', 'ARMED', 'ACTIVE_DEFER']).optional(),
  })
  .strict();

export const SimulatedInventory = z
  .object({
    gpuClass: SafeName('gpuClass').optional(),
    cudaVersion: version.optional(),
    driverVersion: version.optional(),
    gpus: z.array(SimulatedGpu),
    hcas: z.array(SimulatedHca).optional(),
    /** The fabric the HCAs are on; wins over the agent's `fabric` label, as the file describes the whole host. */
    fabric: z.string().min(1).optional(),
  })
  .strict()
  .superRefine((inv, ctx) => {
    const indices = new Set<number>();
    inv.gpus.forEach((gpu, i) => {
      if (indices.has(gpu.index))
        ctx.addIssue({ code: 'custom', path: ['gpus', i, 'index'], message: `GPU index ${gpu.index} appears twice` });
      indices.add(gpu.index);
    });
    const hcaNames = new Set<string>();
    (inv.hcas ?? []).forEach((hca, i) => {
      if (hcaNames.has(hca.name)) ctx.addIssue({ code: 'custom', path: ['hcas', i, 'name'], message: `HCA ${hca.name} appears twice` });
      hcaNames.add(hca.name);
    });
    inv.gpus.forEach((gpu, i) => {
      (gpu.nvlinkPeers ?? []).forEach((peer, j) => {
        if (peer.index === gpu.index || !indices.has(peer.index)) {
          ctx.addIssue({ code: 'custom', path: ['gpus', i, 'nvlinkPeers', j, 'index'], message: `no other GPU has index ${peer.index}` });
        }
      });
      (gpu.nearHcas ?? []).forEach((name, j) => {
        if (!hcaNames.has(name))
          ctx.addIssue({ code: 'custom', path: ['gpus', i, 'nearHcas', j], message: `${name} is not listed under hcas` });
      });
    });
  });

export type SimulatedInventory = z.infer<typeof SimulatedInventory>;

export interface SimulatedOptions {
  /** The agent's node id: the seed of the GPU uuids a file leaves out. */
  nodeId: string;
  fabricLabel?: string;
  maxTemperatureC?: number;
}

/** gpus[2].memoryTotalMib */
export function formatIssuePath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return '(top level)';
  return path.map((key, i) => (typeof key === 'number' ? `[${key}]` : `${i === 0 ? '' : '.'}${String(key)}`)).join('');
}

/** Validates parsed file contents; the error names the source and every bad path. */
export function parseSimulatedInventory(data: unknown, source: string): SimulatedInventory {
  const result = SimulatedInventory.safeParse(data);
  if (result.success) return result.data;
  const lines = result.error.issues.map((issue) => `  ${formatIssuePath(issue.path)}: ${issue.message.replace(/^Invalid input: /, '')}`);
  throw new Error(`simulated inventory ${source} is not valid:\n${lines.join('\n')}`);
}

/** A stable uuid in nvidia-smi's shape, different for every (node, index). */
export function simulatedGpuUuid(nodeId: string, index: number): string {
  const h = createHash('sha256').update(`llmgw-simulated/${nodeId}/${index}`).digest('hex');
  return `GPU-${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

/** Reads `file` (YAML or JSON), or generates `builtin:h100x8` / `builtin:a100x8` / `builtin:l40sx4`. */
export async function loadSimulatedInventory(file: string, opts: SimulatedOptions): Promise<DiscoveredHost> {
  return simulatedHost(await readSimulatedInventory(file), opts);
}

export async function readSimulatedInventory(file: string): Promise<SimulatedInventory> {
  if (file.startsWith(BUILTIN_PREFIX)) {
    const name = file.slice(BUILTIN_PREFIX.length);
    if (!isBuiltinName(name)) {
      throw new Error(
        `simulated inventory ${file}: no such built-in; known: ${Object.keys(BUILTIN_INVENTORIES)
          .map((n) => BUILTIN_PREFIX + n)
          .join(', ')}`,
      );
    }
    return parseSimulatedInventory(BUILTIN_INVENTORIES[name](), file);
  }
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new Error(`simulated inventory ${file} cannot be read: ${error instanceof Error ? error.message : String(error)}`, {
      cause: error,
    });
  }
  let data: unknown;
  try {
    // JSON is YAML too, so one parser serves both.
    data = parseYaml(text);
  } catch (error) {
    throw new Error(`simulated inventory ${file} is not valid YAML or JSON: ${error instanceof Error ? error.message : String(error)}`, {
      cause: error,
    });
  }
  return parseSimulatedInventory(data, file);
}

/** Turns a validated inventory into what real discovery returns, through the same inventory and health code. */
export function simulatedHost(inv: SimulatedInventory, opts: SimulatedOptions): DiscoveredHost {
  const rows: QueryGpuRow[] = inv.gpus.map((gpu) => {
    const row: QueryGpuRow = {
      index: gpu.index,
      uuid: gpu.uuid ?? simulatedGpuUuid(opts.nodeId, gpu.index),
      name: gpu.name,
      memoryTotalMib: gpu.memoryTotalMib,
      memoryUsedMib: gpu.memoryUsedMib ?? 0,
      computeCapability: gpu.computeCapability ?? '',
      pciBusId: gpu.pciBusId ?? '',
      driverVersion: inv.driverVersion ?? '',
    };
    if (gpu.temperatureC !== undefined) row.temperatureC = gpu.temperatureC;
    if (gpu.uncorrectedEccErrors !== undefined) row.uncorrectedEcc = gpu.uncorrectedEccErrors;
    return row;
  });
  const topology: TopologyGpu[] = inv.gpus.map((gpu) => {
    const topo: TopologyGpu = {
      index: gpu.index,
      nvlinkPeers: (gpu.nvlinkPeers ?? []).map((peer) => ({ index: peer.index, links: peer.links })),
      nics: (gpu.nearHcas ?? []).map((name) => ({ name, relation: 'PIX' as const })),
    };
    if (gpu.numaNode !== undefined) topo.numaAffinity = gpu.numaNode;
    return topo;
  });
  return buildInventory({
    rows,
    topology,
    hcas: (inv.hcas ?? []).map((hca) => ({
      name: hca.name,
      rateGbps: hca.rateGbps,
      ...(hca.numaNode !== undefined ? { numaNode: hca.numaNode } : {}),
      linkLayer: hca.linkLayer ?? 'InfiniBand',
      state: hca.state ?? 'ACTIVE',
    })),
    cudaVersion: inv.cudaVersion,
    driverVersion: inv.driverVersion,
    computeApps: [],
    fabricLabel: inv.fabric ?? opts.fabricLabel,
    maxTemperatureC: opts.maxTemperatureC,
    gpuClass: inv.gpuClass,
  });
}
