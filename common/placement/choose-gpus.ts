// Which GPUs of one host a shard gets. Pure and deterministic, so the node workflow
// can run it inside its Update handler (the single writer of the host's GPUs).
//
// Policy, in order:
//  1. Fit: only managed GPUs, without problems, not allocated, with enough free memory
//     (memory another process uses counts against the minimum).
//  2. For more than one GPU, prefer sets in which every pair is NVLink-connected, then
//     sets on one NUMA node, then the fewest NUMA nodes.
//  3. A sharing request (an engine able to sleep) may be given GPUs that sleepers hold
//     (`occupied`, common/placement/shared-gpus.ts), but sets with fewer of them come first:
//     a GPU with nothing on it is never asked to make room.
//  4. Among equals, the lowest indices, which packs shards towards one end of the host
//     and leaves whole NVLink groups free for larger ones.
import type { GpuInfo } from '../node-types.js';

export interface GpuChoiceRequest {
  count: number;
  minFreeMemoryMib?: number;
  /** GPUs it may take that already hold sleepers' engines: taken last, and their memory is the sleepers' to account. */
  occupied?: number[];
}

export type GpuChoice = { ok: true; gpuIndices: number[]; hcas: string[] } | { ok: false; reason: string };

export function eligibleGpus(
  gpus: GpuInfo[],
  managed: number[],
  allocated: number[],
  minFreeMemoryMib = 0,
  occupied: number[] = [],
): { eligible: GpuInfo[]; excluded: string[] } {
  const eligible: GpuInfo[] = [];
  const excluded: string[] = [];
  for (const gpu of gpus) {
    if (!managed.includes(gpu.index)) continue;
    if (allocated.includes(gpu.index)) continue;
    if (gpu.problems.length) {
      excluded.push(`GPU ${gpu.index}: ${gpu.problems.join('; ')}`);
      continue;
    }
    const free = gpu.memoryTotalMib - gpu.memoryUsedMib;
    if (free < minFreeMemoryMib && !occupied.includes(gpu.index)) {
      excluded.push(`GPU ${gpu.index}: ${free} MiB free < ${minFreeMemoryMib} MiB needed`);
      continue;
    }
    eligible.push(gpu);
  }
  return { eligible, excluded };
}

export function chooseGpus(gpus: GpuInfo[], managed: number[], allocated: number[], request: GpuChoiceRequest): GpuChoice {
  const occupied = request.occupied ?? [];
  const { eligible, excluded } = eligibleGpus(gpus, managed, allocated, request.minFreeMemoryMib, occupied);
  if (request.count <= 0) return { ok: true, gpuIndices: [], hcas: [] };
  if (eligible.length < request.count) {
    const detail = excluded.length ? ` (${excluded.join(', ')})` : '';
    return { ok: false, reason: `needs ${request.count} GPU${request.count > 1 ? 's' : ''}, ${eligible.length} free and healthy${detail}` };
  }
  let best: { set: GpuInfo[]; score: number[] } | undefined;
  for (const set of combinations(eligible, request.count, 20_000)) {
    const score = [set.filter((gpu) => occupied.includes(gpu.index)).length, ...scoreSet(set)];
    if (!best || compareScores(score, best.score) < 0) best = { set, score };
  }
  const chosen = (best?.set ?? eligible.slice(0, request.count)).map((gpu) => gpu.index).sort((a, b) => a - b);
  const hcas = [...new Set(eligible.filter((gpu) => chosen.includes(gpu.index)).flatMap((gpu) => gpu.nearHcas))].sort();
  return { ok: true, gpuIndices: chosen, hcas };
}

/** Lower is better: [pairs not on NVLink, NUMA nodes spanned, sum of indices]. */
function scoreSet(set: GpuInfo[]): number[] {
  let missingLinks = 0;
  for (let i = 0; i < set.length; i++) {
    for (let j = i + 1; j < set.length; j++) {
      const a = set[i]!;
      const b = set[j]!;
      if (!a.nvlinkPeers.includes(b.index) && !b.nvlinkPeers.includes(a.index)) missingLinks++;
    }
  }
  const numaNodes = new Set(set.map((gpu) => gpu.numaNode)).size;
  const indexSum = set.reduce((sum, gpu) => sum + gpu.index, 0);
  return [missingLinks, numaNodes, indexSum];
}

function compareScores(a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) {
    const diff = (a[i] ?? 0) - (b[i] ?? 0);
    if (diff !== 0) return diff;
  }
  return 0;
}

/** Subsets of `k` items in lexicographic order, at most `limit` of them (hosts have ≤ 16 GPUs). */
function* combinations<T>(items: T[], k: number, limit: number): Generator<T[]> {
  const idx = Array.from({ length: k }, (_, i) => i);
  let produced = 0;
  while (produced < limit) {
    yield idx.map((i) => items[i]!);
    produced++;
    let pos = k - 1;
    while (pos >= 0 && idx[pos] === items.length - k + pos) pos--;
    if (pos < 0) return;
    idx[pos]!++;
    for (let j = pos + 1; j < k; j++) idx[j] = idx[j - 1]! + 1;
  }
}
