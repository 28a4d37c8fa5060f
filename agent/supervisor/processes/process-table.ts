// Questions about processes asked of a process table (the real /proc, or a launcher's own):
// is this pid still the process we recorded, who is in a process group. Agent side; pure
// over the table it is given, so the supervisor asks them the same way of any launcher.
import { isLiveStat, type ProcStat } from '../../../common/proc-stat.js';

/** The two reads every question below needs. */
export interface ProcessTable {
  /** Every process (thread-group leader) now. */
  listPids(): number[];
  /** undefined when the process is gone (or cannot be read). */
  readStat(pid: number): ProcStat | undefined;
}

/**
 * True when `pid` is alive and is the very process that started at `startTicks`: a pid
 * the kernel has handed to some other program since is never mistaken for our engine.
 */
export function sameProcess(table: ProcessTable, pid: number, startTicks: string): boolean {
  if (startTicks === '') return false;
  const stat = table.readStat(pid);
  return isLiveStat(stat) && stat.startTicks === startTicks;
}

export function aliveIn(table: ProcessTable, pid: number): boolean {
  return isLiveStat(table.readStat(pid));
}

/** The live (non-zombie) members of a process group. */
export function membersOf(table: ProcessTable, pgid: number): ProcStat[] {
  const members: ProcStat[] = [];
  for (const pid of table.listPids()) {
    const stat = table.readStat(pid);
    if (isLiveStat(stat) && stat.pgrp === pgid) members.push(stat);
  }
  return members;
}
