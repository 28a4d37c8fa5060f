// One installer at a time for a thing in ~/.cache/llmgw: a lock folder holding the owner's pid,
// so that two clones (or a test run and `llmgw up`) building the same program share one build,
// and a lock left by a killed process is taken over rather than waited on for ever.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Log } from '../temporal/go-install.js';
import { isAlive } from './proc-stat.js';

function tryTake(lockDir: string): boolean {
  try {
    mkdirSync(lockDir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    let owner: number;
    try {
      owner = Number(readFileSync(join(lockDir, 'pid'), 'utf8'));
    } catch {
      // Taken a moment ago and its pid not written yet: let the owner finish.
      return false;
    }
    if (Number.isInteger(owner) && isAlive(owner)) return false;
    rmSync(lockDir, { recursive: true, force: true });
    return tryTake(lockDir);
  }
  writeFileSync(join(lockDir, 'pid'), String(process.pid));
  return true;
}

/** Runs `work` holding the lock; waits (at most `maxWaitMs`) while another live process holds it. */
export async function withCacheLock<T>(lockDir: string, log: Log, work: () => Promise<T>, maxWaitMs = 60 * 60_000): Promise<T> {
  mkdirSync(dirname(lockDir), { recursive: true });
  const deadline = Date.now() + maxWaitMs;
  let told = false;
  while (!tryTake(lockDir)) {
    if (!told) log(`llmgw: waiting for another process installing into ${lockDir.replace(/\.lock$/, '')}`);
    told = true;
    if (Date.now() > deadline) throw new Error(`${lockDir} has been held for ${maxWaitMs / 60_000} min; remove it if no install runs`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  try {
    return await work();
  } finally {
    rmSync(lockDir, { recursive: true, force: true });
  }
}
