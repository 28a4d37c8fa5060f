// A simulated host's GPU memory, as files: what each simulated GPU holds in all (written by its
// agent) and what each fake engine on it holds now, awake or asleep (written by the engine).
// Engines are separate processes, so this folder is where the awake engines of one GPU see
// each other. Used by the fake engine (its allocations) and the agent (memory used in reports).
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** One engine's holding on one GPU. */
export interface LedgerEntry {
  pid: number;
  /** MiB it holds on the GPU now (0 for a level-1 or level-2 sleeper). */
  gpuMib: number;
  /** MiB of host RAM it holds for the GPU (its weights, while asleep at level 1). */
  hostMib: number;
  sleeping: boolean;
}

/** <stateDir>/sim-gpus: an agent's ledger, for the fake engines it starts on simulated GPUs. */
export function simulatedLedgerDir(stateDir: string): string {
  return join(stateDir, 'sim-gpus');
}

const gpuDir = (dir: string, gpu: number): string => join(dir, `gpu-${gpu}`);
const LOCK_STALE_MS = 5_000;
const LOCK_TRIES = 400;

/** The agent: the GPU's capacity and what other processes use of it (the inventory's figures). */
export function writeGpuTotal(dir: string, gpu: number, totalMib: number, baseUsedMib = 0): void {
  mkdirSync(gpuDir(dir, gpu), { recursive: true });
  writeFileSync(join(gpuDir(dir, gpu), 'total.json'), JSON.stringify({ totalMib, baseUsedMib }));
}

export function gpuTotal(dir: string, gpu: number): { totalMib: number; baseUsedMib: number } | undefined {
  try {
    return JSON.parse(readFileSync(join(gpuDir(dir, gpu), 'total.json'), 'utf8')) as { totalMib: number; baseUsedMib: number };
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The live engines' entries on `gpu`, by key; entries of engines that died are removed. */
export function entries(dir: string, gpu: number): Map<string, LedgerEntry> {
  const found = new Map<string, LedgerEntry>();
  let names: string[];
  try {
    names = readdirSync(gpuDir(dir, gpu)).filter((name) => name.startsWith('engine-') && name.endsWith('.json'));
  } catch {
    return found;
  }
  for (const name of names) {
    const file = join(gpuDir(dir, gpu), name);
    try {
      const entry = JSON.parse(readFileSync(file, 'utf8')) as LedgerEntry;
      if (alive(entry.pid)) found.set(name.slice('engine-'.length, -'.json'.length), entry);
      else rmSync(file, { force: true });
    } catch {
      // Being replaced right now, or gone: the next read sees it.
    }
  }
  return found;
}

/** GPU memory used on `gpu`: the inventory's own figure plus every live engine's. */
export function gpuUsedMib(dir: string, gpu: number): number | undefined {
  const total = gpuTotal(dir, gpu);
  if (total === undefined) return undefined;
  let used = total.baseUsedMib;
  for (const entry of entries(dir, gpu).values()) used += entry.gpuMib;
  return used;
}

export function writeEntry(dir: string, gpu: number, key: string, entry: LedgerEntry): void {
  const file = join(gpuDir(dir, gpu), `engine-${key}.json`);
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(entry));
  renameSync(tmp, file);
}

export function removeEntry(dir: string, gpu: number, key: string): void {
  rmSync(join(gpuDir(dir, gpu), `engine-${key}.json`), { force: true });
}

/**
 * Runs `work` holding the ledger's lock (a directory: mkdir is atomic), so that a check of
 * what is free and the allocation after it are one step for every engine on the host.
 */
export async function withLedgerLock<T>(dir: string, work: () => T): Promise<T> {
  const lock = join(dir, '.lock');
  for (let attempt = 0; attempt < LOCK_TRIES; attempt++) {
    if (tryLock(lock)) {
      try {
        return work();
      } finally {
        rmdirSync(lock);
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`the simulated GPU ledger ${dir} stayed locked`);
}

function tryLock(lock: string): boolean {
  try {
    mkdirSync(lock);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  // A holder that died leaves its lock: taken over once it is clearly older than any holding.
  try {
    if (Date.now() - statSync(lock).mtimeMs > LOCK_STALE_MS) rmdirSync(lock);
  } catch {
    // Released meanwhile.
  }
  return false;
}
