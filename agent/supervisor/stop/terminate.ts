// Ending processes: SIGTERM, a grace period, then SIGKILL, for whole process groups or single
// pids. Agent side; used to stop shards and to kill engines nobody can describe.
import type { Launcher } from '../processes/launcher.js';
import { membersOf, sameProcess } from '../processes/process-table.js';

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

export function targetAlive(launcher: Launcher, t: KillTarget): boolean {
  if (t.group) return membersOf(launcher, t.pid).length > 0;
  return sameProcess(launcher, t.pid, t.startTicks);
}

function send(launcher: Launcher, t: KillTarget, signal: NodeJS.Signals): void {
  if (t.group) launcher.signalGroup(t.pid, signal);
  // A pid that is not the process we judged any more belongs to someone else now.
  else if (sameProcess(launcher, t.pid, t.startTicks)) launcher.signalPid(t.pid, signal);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function waitGone(launcher: Launcher, targets: KillTarget[], ms: number): Promise<KillTarget[]> {
  const deadline = Date.now() + ms;
  let alive = targets.filter((t) => targetAlive(launcher, t));
  while (alive.length > 0 && Date.now() < deadline) {
    await sleep(POLL_MS);
    alive = alive.filter((t) => targetAlive(launcher, t));
  }
  return alive;
}

export async function terminate(launcher: Launcher, targets: KillTarget[], graceMs: number): Promise<TerminateResult> {
  const alive = targets.filter((t) => targetAlive(launcher, t));
  for (const t of alive) send(launcher, t, 'SIGTERM');
  const stubborn = await waitGone(launcher, alive, graceMs);
  if (stubborn.length === 0) return { survivors: [], finalSignal: 'SIGTERM' };
  for (const t of stubborn) send(launcher, t, 'SIGKILL');
  return { survivors: await waitGone(launcher, stubborn, AFTER_KILL_MS), finalSignal: 'SIGKILL' };
}
