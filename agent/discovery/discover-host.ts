// What this agent knows about its host: real discovery through nvidia-smi and sysfs,
// or a simulated inventory file (same fields, topology included) on hosts without GPUs.
import { networkInterfaces } from 'node:os';
import { discoverRealHost } from './discover.js';
import { loadSimulatedInventory } from './simulated.js';
import type { DiscoveredHost } from './inventory.js';
import type { AgentConfig } from '../config.js';

export async function discoverHost(config: AgentConfig): Promise<DiscoveredHost> {
  if (config.gpus === 'real') {
    return discoverRealHost({ sysfsRoot: config.sysfsRoot, fabricLabel: config.labels.fabric, maxTemperatureC: config.maxTemperatureC });
  }
  return loadSimulatedInventory(config.gpus, {
    nodeId: config.nodeId,
    fabricLabel: config.labels.fabric,
    maxTemperatureC: config.maxTemperatureC,
  });
}

export function gpuSource(config: AgentConfig): string {
  return config.gpus === 'real' ? 'nvidia-smi' : `simulated:${config.gpus}`;
}

/** The network interface that carries `address` (e.g. 10.0.0.5 → ens3, 127.0.0.1 → lo), if any. */
export function interfaceOf(address: string, interfaces = networkInterfaces()): string | undefined {
  for (const [name, addresses] of Object.entries(interfaces)) {
    if (addresses?.some((a) => a.address === address)) return name;
  }
  return undefined;
}
