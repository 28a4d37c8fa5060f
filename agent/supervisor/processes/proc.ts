// Linux /proc readers and process-group signalling for the agent's supervisor. Agent side:
// the supervisor's only way to see engines it did not start itself (adopted, or left behind).
import { readdirSync, readFileSync } from 'node:fs';
import { readStat, type ProcStat } from '../../../common/proc-stat.js';
import { membersOf, sameProcess, type ProcessTable } from './process-table.js';

export function readStartTicks(pid: number): string | undefined {
  return readStat(pid)?.startTicks;
}

/** The environment the process was started with; undefined when gone or not ours to read. */
export function readEnviron(pid: number): Record<string, string> | undefined {
  let raw: string;
  try {
    raw = readFileSync(`/proc/${pid}/environ`, 'utf8');
  } catch {
    return undefined;
  }
  const env: Record<string, string> = {};
  for (const entry of raw.split('\0')) {
    const eq = entry.indexOf('=');
    if (eq <= 0) continue;
    env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  return env;
}

/** The argument vector, for telling an operator what was killed; undefined when unreadable. */
export function readCmdline(pid: number): string[] | undefined {
  try {
    const raw = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    const argv = raw.split('\0');
    if (argv.at(-1) === '') argv.pop();
    return argv;
  } catch {
    return undefined;
  }
}

/** Every process (thread-group leader) on the host now. */
export function listPids(): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (/^\d+$/.test(name)) pids.push(Number(name));
  }
  return pids;
}

/** The host's real process table, read from /proc. */
export const hostProcessTable: ProcessTable = { listPids, readStat };

/** See process-table.ts sameProcess; on the host's real process table. */
export function isSameProcess(pid: number, startTicks: string): boolean {
  return sameProcess(hostProcessTable, pid, startTicks);
}

/** The live (non-zombie) members of a process group. */
export function groupMembers(pgid: number): ProcStat[] {
  return membersOf(hostProcessTable, pgid);
}

export function processGroupAlive(pgid: number): boolean {
  return groupMembers(pgid).length > 0;
}

function isEsrch(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as NodeJS.ErrnoException).code === 'ESRCH';
}

/** Signals every process in the group; a group that is already gone is not an error. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  // pgid 0 or 1 would signal our own group or everything we may signal: never what we mean.
  if (!Number.isInteger(pgid) || pgid <= 1) throw new Error(`refusing to signal process group ${pgid}`);
  try {
    process.kill(-pgid, signal);
  } catch (err) {
    if (!isEsrch(err)) throw err;
  }
}

/** Signals one process; one that is already gone is not an error. */
export function signalPid(pid: number, signal: NodeJS.Signals): void {
  if (!Number.isInteger(pid) || pid <= 1) throw new Error(`refusing to signal pid ${pid}`);
  try {
    process.kill(pid, signal);
  } catch (err) {
    if (!isEsrch(err)) throw err;
  }
}

/** Our own pid and every ancestor's: processes the supervisor must never judge or signal. */
export function selfAndAncestors(): Set<number> {
  const pids = new Set<number>();
  let pid = process.pid;
  while (pid > 1 && !pids.has(pid)) {
    pids.add(pid);
    const stat = readStat(pid);
    if (!stat) break;
    pid = stat.ppid;
  }
  return pids;
}
