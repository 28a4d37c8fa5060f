// Judges whether a GPU is lost while engines run on it, from what the agent can read on a
// host: the kernel's Xid lines (NVRM: Xid (PCI:…): N, …) and nvidia-smi's query rows (a GPU
// gone from them, or with uncorrected ECC errors). Agent side; pure text and rows in, faults out.
import type { QueryGpuRow } from './nvidia-smi.js';

/**
 * Xids after which the GPU cannot be trusted until it is reset (NVIDIA's Xid catalogue): the
 * engine on it is dead or computing on corrupt memory, so its replica must move. Other Xids
 * (an application's own fault, a recoverable NVLink error) are left to the engine.
 */
export const GPU_LOST_XIDS: Record<number, string> = {
  48: 'double-bit ECC error',
  79: 'GPU has fallen off the bus',
  94: 'contained ECC error (uncorrectable)',
  95: 'uncontained ECC error',
};

export interface XidEvent {
  /** Domain:bus:device as the kernel prints it, e.g. 0000:18:00. */
  pciBusId: string;
  xid: number;
}

export interface WatchedGpu {
  index: number;
  /** As nvidia-smi prints it: 00000000:18:00.0. */
  pciBusId: string;
}

export interface GpuFault {
  index: number;
  reason: string;
}

/** `00000000:18:00.0` (nvidia-smi) and `0000:18:00` (the kernel) name the same device. */
export function kernelBusId(nvidiaSmiBusId: string): string {
  const match = /^(?:[0-9a-f]{4})?([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})/i.exec(nvidiaSmiBusId.trim());
  return match ? `${match[1]}:${match[2]}:${match[3]}`.toLowerCase() : nvidiaSmiBusId.trim().toLowerCase();
}

const XID_LINE = /NVRM: Xid \(PCI:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\): (\d+)/;

export function parseXidLines(text: string): XidEvent[] {
  const events: XidEvent[] = [];
  for (const line of text.split('\n')) {
    const match = XID_LINE.exec(line);
    if (match) events.push({ pciBusId: match[1]!.toLowerCase(), xid: Number(match[2]) });
  }
  return events;
}

/**
 * The faults these readings show on the watched GPUs. `rows` undefined: nvidia-smi did not
 * answer, which says nothing about one GPU (the agent logs it; discovery's problems cover a
 * driver that is gone for good).
 */
export function judgeGpuFaults(watched: WatchedGpu[], rows: QueryGpuRow[] | undefined, xids: XidEvent[]): GpuFault[] {
  const faults: GpuFault[] = [];
  for (const gpu of watched) {
    const reasons: string[] = [];
    const busId = kernelBusId(gpu.pciBusId);
    for (const event of xids) {
      const what = GPU_LOST_XIDS[event.xid];
      if (what && event.pciBusId === busId) reasons.push(`Xid ${event.xid}: ${what}`);
    }
    if (rows) {
      const row = rows.find((r) => kernelBusId(r.pciBusId) === busId) ?? rows.find((r) => r.index === gpu.index && !r.pciBusId);
      if (!row) reasons.push('gone from nvidia-smi');
      else if (row.uncorrectedEcc !== undefined && row.uncorrectedEcc > 0) reasons.push(`${row.uncorrectedEcc} uncorrected ECC error(s)`);
    }
    if (reasons.length) faults.push({ index: gpu.index, reason: [...new Set(reasons)].join('; ') });
  }
  return faults;
}
