// Questions about processes asked of a process table (the real /proc, or a launcher's own):
// is this pid still the process we recorded, who is in a process group. Agent side; pure
// over the table it is given, so the supervisor asks them the same way of any launcher.

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

/** The two reads every question below needs. */
export interface ProcessTable {
  /** Every process (thread-group leader) now. */
  listPids(): number[];
  /** undefined when the process is gone (or cannot be read). */
  readStat(pid: number): ProcStat | undefined;
}

export function isLiveStat(stat: ProcStat | undefined): stat is ProcStat {
  // A zombie has exited and holds nothing but its exit status: it is dead to us.
  return stat !== undefined && stat.state !== 'Z' && stat.state !== 'X';
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
