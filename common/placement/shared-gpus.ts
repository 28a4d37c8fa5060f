// GPUs shared by sleepers (issue 38, docs/sleep.md "Sharing GPUs"): the share of a GPU an engine
// able to sleep takes awake, and which GPUs a request may take given who holds them. Pure and
// deterministic: the node workflow (its single writer) and placement's index both use it.
import type { Allocation } from '../node-types.js';

/** vLLM's default `--gpu-memory-utilization` (the fake engine's too). */
export const VLLM_DEFAULT_SHARE = 0.9;
/** Awake shares are summed as floats: 0.3 + 0.7 must still fit in 1. */
const EPSILON = 1e-9;

const ENGINE_NAMES: Record<number, string> = { 1: 'vllm', 2: 'sglang', 3: 'fake', 4: 'llamacpp' };

/** The share of each of its GPUs an engine takes awake: its `--gpu-memory-utilization`, else its engine's default. */
export function awakeShareOf(engine: string | number, args: readonly string[]): number {
  const name = typeof engine === 'number' ? (ENGINE_NAMES[engine] ?? '') : engine;
  // llama-server has no such flag: awake, it is taken to fill its GPUs.
  if (name === 'llamacpp') return 1;
  const given = flagValue(args, '--gpu-memory-utilization');
  const share = given === undefined ? NaN : Number(given);
  return Number.isFinite(share) && share > 0 && share <= 1 ? share : VLLM_DEFAULT_SHARE;
}

/**
 * Whether an engine started with these args can sleep, and so share its GPUs: the flags a sleep
 * policy adds (catalog/sleep.ts). Used for engines an agent reports, whose profile is not at hand.
 */
export function startedAbleToSleep(engine: string | number, args: readonly string[]): boolean {
  const name = typeof engine === 'number' ? (ENGINE_NAMES[engine] ?? '') : engine;
  if (name === 'llamacpp') return flagValue(args, '--sleep-idle-seconds') !== undefined;
  if (name === 'vllm' || name === 'fake') return args.includes('--enable-sleep-mode');
  return false;
}

function flagValue(args: readonly string[], flag: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === flag) return args[i + 1];
    if (arg.startsWith(`${flag}=`)) return arg.slice(flag.length + 1);
  }
  return undefined;
}

/** An allocation that shares its GPUs: it was reserved (or restored) for an engine able to sleep. */
export function isSharing(allocation: Allocation): boolean {
  return typeof allocation.awakeShare === 'number';
}

/** What is awake on one GPU: the awake shares of its sharing holders, 1 for a holder that does not share. */
export function awakeLoad(allocations: readonly Allocation[], gpu: number): number {
  let load = 0;
  for (const a of allocations) {
    if (!a.gpuIndices.includes(gpu)) continue;
    if (!isSharing(a)) load += 1;
    else if (!a.asleep) load += a.awakeShare!;
  }
  return load;
}

export function fits(load: number, share: number): boolean {
  return load + share <= 1 + EPSILON;
}

/**
 * Which GPUs a request may not take (`blocked`), and which of those it may take already hold
 * sleepers (`occupied`, preferred last). A request that does not share (`share` undefined) takes
 * only empty GPUs; one that shares may also take a GPU whose every holder shares, as long as the
 * awake shares there and its own (it starts awake) fit.
 */
export function gpuAvailability(allocations: readonly Allocation[], share: number | undefined): { blocked: number[]; occupied: number[] } {
  const held = [...new Set(allocations.flatMap((a) => a.gpuIndices))].sort((a, b) => a - b);
  if (share === undefined) return { blocked: held, occupied: [] };
  const blocked: number[] = [];
  const occupied: number[] = [];
  for (const gpu of held) {
    const holders = allocations.filter((a) => a.gpuIndices.includes(gpu));
    if (holders.every(isSharing) && fits(awakeLoad(allocations, gpu), share)) occupied.push(gpu);
    else blocked.push(gpu);
  }
  return { blocked, occupied };
}

/**
 * The awake load of each held GPU whose every holder shares, lowest index first: what the node's
 * memo lists for placement's index (`sharedGpus`), beside the count of empty GPUs.
 */
export function sharedGpuLoads(allocations: readonly Allocation[], usable: readonly number[]): number[] {
  const held = [...new Set(allocations.flatMap((a) => a.gpuIndices))].filter((gpu) => usable.includes(gpu)).sort((a, b) => a - b);
  return held
    .filter((gpu) => allocations.filter((a) => a.gpuIndices.includes(gpu)).every(isSharing))
    .map((gpu) => Math.round(awakeLoad(allocations, gpu) * 1e6) / 1e6);
}

/** How many GPUs a request of `share` could take on a node: its empty ones, and for a sharer, the shared ones it fits on. */
export function roomFor(freeGpus: number, sharedLoads: readonly number[] | undefined, share: number | undefined): number {
  if (share === undefined) return freeGpus;
  return freeGpus + (sharedLoads ?? []).filter((load) => fits(load, share)).length;
}
