// The supervisor's process boundary: starting an engine process, its pid and exit, signals
// to its process group, and the process table the supervisor reads to recognise its own.
// Agent side. Everything above this interface is shared; `childProcessLauncher` is the real
// one (child_process and /proc), and a simulated fleet can put in-process engines behind it.
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import type { ProcessRole } from '../../engines/types.js';
import { readStat } from '../../../common/proc-stat.js';
import { listPids, readCmdline, readEnviron, readStartTicks, selfAndAncestors, signalGroup, signalPid } from './proc.js';
import type { ProcessTable } from './process-table.js';

export interface ProcessExit {
  code: number | null;
  signal: string | null;
}

export interface LaunchRequest {
  role: ProcessRole;
  /** argv[0] is the program; never run through a shell. */
  argv: string[];
  /** The whole environment of the process (nothing is inherited besides). */
  env: Record<string, string>;
  /** stdout and stderr are appended here, by the process itself: it must outlive the agent. */
  logFile: string;
  /** Run as this user and group (the agent's --engine-user); absent: as the agent. */
  user?: { uid: number; gid: number };
}

export interface LaunchedProcess {
  pid: number;
  /** With the pid, identifies the process across pid reuse ('' when it could not be read). */
  startTicks: string;
  /** The process leads its own group: signals to the group reach what it forked. */
  pgid: number;
  /** Resolves once the process has exited and been reaped. */
  exited: Promise<ProcessExit>;
}

export interface Launcher extends ProcessTable {
  /**
   * Starts the process in its own process group, detached from the agent (the agent may exit
   * or die while it runs on). Rejects with the reason when the program cannot be started.
   */
  launch(request: LaunchRequest): Promise<LaunchedProcess>;
  /** The environment the process was started with; undefined when gone or not ours to read. */
  readEnviron(pid: number): Record<string, string> | undefined;
  /** The argument vector, for telling an operator what a process is; undefined when unreadable. */
  readCmdline(pid: number): string[] | undefined;
  /** Signals every member of the group; a group already gone is not an error. */
  signalGroup(pgid: number, signal: NodeJS.Signals): void;
  /** Signals one process; one already gone is not an error. */
  signalPid(pid: number, signal: NodeJS.Signals): void;
  /** The agent itself and its ancestors: never judged, never signalled. */
  selfAndAncestors(): Set<number>;
}

/** Real processes: child_process.spawn (no shell, own process group) and Linux's /proc. */
export const childProcessLauncher: Launcher = {
  async launch(request) {
    const [program, ...args] = request.argv;
    if (program === undefined) throw new Error(`the ${request.role} has an empty command`);
    const fd = openSync(request.logFile, 'a', 0o600);
    let child;
    try {
      // detached: its own process group. The log descriptor is the child's own, so its
      // output does not pass through the agent (whose death would otherwise end it).
      // uid/gid also drop the agent's supplementary groups (libuv calls setgroups before setuid).
      const as = request.user ? { uid: request.user.uid, gid: request.user.gid } : {};
      child = spawn(program, args, { detached: true, stdio: ['ignore', fd, fd], env: request.env, ...as });
    } finally {
      closeSync(fd);
    }
    const pid = child.pid;
    if (pid === undefined) {
      const err = await new Promise<Error>((resolve) => child.once('error', resolve));
      throw new Error(`could not start the ${request.role} (${program}): ${err.message}${accessHint(err, request)}`);
    }
    // An 'error' after a successful spawn (a failed kill) must not crash the agent.
    child.on('error', () => undefined);
    const exited = new Promise<ProcessExit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    // The agent must be able to exit (or die) while its engines run on.
    child.unref();
    return { pid, startTicks: readStartTicks(pid) ?? '', pgid: pid, exited };
  },
  listPids,
  readStat,
  readEnviron,
  readCmdline,
  signalGroup,
  signalPid,
  selfAndAncestors,
};

/** What to do when an engine uid may not run the program: the usual cause is a 0700 home above it. */
function accessHint(err: NodeJS.ErrnoException, request: LaunchRequest): string {
  if (err.code !== 'EACCES' || !request.user) return '';
  const { uid, gid } = request.user;
  return (
    `; the engine runs as uid ${uid} (gid ${gid}), which may not execute it or enter a folder above it: ` +
    `install the engine where group ${gid} or all users may read and enter (not under root's home)`
  );
}
