// Reads the parts of /sys the agent needs about its host: InfiniBand HCAs (rate, state,
// link layer, NUMA node) and a PCI device's NUMA node. A missing file means "unknown", never an error.
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';

export interface HcaInfo {
  name: string;
  rateGbps?: number;
  numaNode?: number;
  /** "InfiniBand" or "Ethernet" (RoCE), as sysfs says. */
  linkLayer?: string;
  /** "ACTIVE", "DOWN", ... without sysfs's numeric prefix. */
  state?: string;
}

async function readText(path: string): Promise<string | undefined> {
  try {
    return (await readFile(path, 'utf8')).trim();
  } catch {
    return undefined;
  }
}

/** "400 Gb/sec (4X NDR)" → 400; "2.5 Gb/sec (1X SDR)" → 2.5. */
export function parseIbRate(text: string | undefined): number | undefined {
  const match = text === undefined ? null : /^(\d+(?:\.\d+)?)\s*Gb\/sec/.exec(text);
  return match?.[1] ? Number(match[1]) : undefined;
}

/** "4: ACTIVE" → "ACTIVE". */
export function parseIbState(text: string | undefined): string | undefined {
  if (text === undefined || text === '') return undefined;
  return text.replace(/^\d+:\s*/, '');
}

/** sysfs writes -1 where the platform has no NUMA information. */
export function parseNumaNode(text: string | undefined): number | undefined {
  if (text === undefined || !/^-?\d+$/.test(text)) return undefined;
  const node = Number(text);
  return node < 0 ? undefined : node;
}

/** Every HCA under class/infiniband, port 1, sorted by name (mlx5_2 before mlx5_10). */
export async function readInfinibandHcas(sysfsRoot: string): Promise<HcaInfo[]> {
  const classDir = join(sysfsRoot, 'class', 'infiniband');
  let names: string[];
  try {
    names = await readdir(classDir);
  } catch {
    return [];
  }
  names.sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  return Promise.all(
    names.map(async (name): Promise<HcaInfo> => {
      const port = join(classDir, name, 'ports', '1');
      const [rate, state, linkLayer, numa] = await Promise.all([
        readText(join(port, 'rate')),
        readText(join(port, 'state')),
        readText(join(port, 'link_layer')),
        readText(join(classDir, name, 'device', 'numa_node')),
      ]);
      const hca: HcaInfo = { name };
      const rateGbps = parseIbRate(rate);
      if (rateGbps !== undefined) hca.rateGbps = rateGbps;
      const numaNode = parseNumaNode(numa);
      if (numaNode !== undefined) hca.numaNode = numaNode;
      if (linkLayer) hca.linkLayer = linkLayer;
      const parsedState = parseIbState(state);
      if (parsedState !== undefined) hca.state = parsedState;
      return hca;
    }),
  );
}

/**
 * nvidia-smi prints an 8-digit PCI domain in upper case (00000000:18:00.0); sysfs names
 * the device with a 4-digit domain in lower case (0000:18:00.0).
 */
export function sysfsPciBusId(pciBusId: string): string {
  const id = pciBusId.trim().toLowerCase();
  const match = /^([0-9a-f]+):([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])$/.exec(id);
  if (!match?.[1] || !match[2]) return id;
  return `${match[1].slice(-4).padStart(4, '0')}:${match[2]}`;
}

export async function readPciNumaNode(sysfsRoot: string, pciBusId: string): Promise<number | undefined> {
  if (pciBusId === '') return undefined;
  return parseNumaNode(await readText(join(sysfsRoot, 'bus', 'pci', 'devices', sysfsPciBusId(pciBusId), 'numa_node')));
}
