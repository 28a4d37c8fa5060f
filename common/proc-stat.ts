// A process's line in /proc/<pid>/stat, and whether a pid names a live process. Shared by the
// agent's supervisor (engines it adopts or finds) and common/cache-lock.ts (a lock whose owner
// died is taken over); Linux only, like the agent.
import { readFileSync } from 'node:fs';

export interface ProcStat {
  pid: number;
  /** One letter: R, S, D, Z, T, … (field 3). */
  state: string;
  ppid: number;
  /** The process group id (field 5). */
  pgrp: number;
  /** Clock ticks after boot at which the process started (field 22), as a decimal string. */
  startTicks: string;
}

/**
 * Parses /proc/<pid>/stat. The command name (field 2) is in parentheses and may itself
 * contain spaces and parentheses, so the fixed fields are read after the LAST ')'.
 */
export function parseStat(pid: number, text: string): ProcStat | undefined {
  const close = text.lastIndexOf(')');
  if (close < 0) return undefined;
  // Fields from 3 on; field N is rest[N - 3].
  const rest = text
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  const state = rest[0];
  const ppid = Number(rest[1]);
  const pgrp = Number(rest[2]);
  const startTicks = rest[19];
  if (state === undefined || startTicks === undefined || !/^\d+$/.test(startTicks)) return undefined;
  if (!Number.isInteger(ppid) || !Number.isInteger(pgrp)) return undefined;
  return { pid, state, ppid, pgrp, startTicks };
}

export function readStat(pid: number): ProcStat | undefined {
  try {
    return parseStat(pid, readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

export function isLiveStat(stat: ProcStat | undefined): stat is ProcStat {
  // A zombie has exited and holds nothing but its exit status: it is dead to us.
  return stat !== undefined && stat.state !== 'Z' && stat.state !== 'X';
}

/** True while `pid` names a process that has not exited (a zombie counts as exited). */
export function isAlive(pid: number): boolean {
  return isLiveStat(readStat(pid));
}
