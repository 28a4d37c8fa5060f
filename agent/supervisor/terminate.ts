// Ending processes: SIGTERM, a grace period, then SIGKILL, for whole process groups or single
// pids. Agent side; used to stop shards and to kill engines nobody can describe.
import { groupMembers, isSameProcess, signalGroup, signalPid } from './proc.js';

export interface KillTarget {
  pid: number;
  startTicks: string;
  /** Signal the whole process group led by `pid` (the supervisor spawns each process as a group leader). */
  group: boolean;
}

export interface TerminateResult {
  /** Targets still alive after SIGKILL and the wait after it (a process stuck in the kernel). */
  survivors: KillTarget[];
  /** The signal that ended the last of them: SIGTERM if the grace period was enough. */
  finalSignal: NodeJS.Signals;
}

const POLL_MS = 100;
const AFTER_KILL_MS = 3000;

export function targetAlive(t: KillTarget): boolean {
  if (t.group) return groupMembers(t.pid).length > 0;
  return isSameProcess(t.pid, t.startTicks);
}

function send(t: KillTarget, signal: NodeJS.Signals): void {
  if (t.group) signalGroup(t.pid, signal);
  // A pid that is not the process we judged any more belongs to someone else now.
  else if (isSameProcess(t.pid, t.startTicks)) signalPid(t.pid, signal);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function waitGone(targets: KillTarget[], ms: number): Promise<KillTarget[]> {
  const deadline = Date.now() + ms;
  let alive = targets.filter(targetAlive);
  while (alive.length > 0 && Date.now() < deadline) {
    await sleep(POLL_MS);
    alive = alive.filter(targetAlive);
  }
  return alive;
}

export async function terminate(targets: KillTarget[], graceMs: number): Promise<TerminateResult> {
  const alive = targets.filter(targetAlive);
  for (const t of alive) send(t, 'SIGTERM');
  const stubborn = await waitGone(alive, graceMs);
  if (stubborn.length === 0) return { survivors: [], finalSignal: 'SIGTERM' };
  for (const t of stubborn) send(t, 'SIGKILL');
  return { survivors: await waitGone(stubborn, AFTER_KILL_MS), finalSignal: 'SIGKILL' };
}
