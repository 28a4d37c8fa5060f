// sim-fleet's end of the engine host (host.ts): starts it when none serves the fleet's socket,
// keeps a mirror of its process table, and gives each simulated host a Launcher over its own
// part of it. Simulated-fleet side. The supervisor asks a launcher synchronously (like /proc),
// so it reads the mirror, which the engine host keeps current with every spawn and exit.
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import type { LaunchedProcess, Launcher, ProcessExit } from '../../agent/supervisor/processes/launcher.js';
import type { ProcStat } from '../../common/proc-stat.js';
import { lineReader, Message, type Request, type VirtualProcess } from './protocol.js';

const LLMGW_BIN = join(__dirname, '../../../bin/llmgw.js');
type Pending = { resolve(message: Extract<Message, { kind: 'reply' }>): void };
type RequestBody = Request extends infer R ? (R extends { id: number } ? Omit<R, 'id'> : never) : never;

export interface EngineHostClient {
  /** The engine host's real pid (kill it, and every virtual engine dies). */
  enginesPid: number;
  launcherFor(scope: string): Launcher;
  /** Every live virtual process, of every simulated host. */
  processes(): VirtualProcess[];
  /** SIGKILL to everything a simulated host runs: the host lost power. */
  killScope(scope: string): Promise<void>;
  /** Resolves when the engine host is gone (every engine with it). */
  lost: Promise<void>;
  close(): void;
}

function connectSocket(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    socket.once('connect', () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Connects to the engine host on `socket`, starting one (detached, long-lived) when none answers. */
export async function openEngineHost(socket: string, log: (line: string) => void): Promise<EngineHostClient> {
  let conn: Socket;
  try {
    conn = await connectSocket(socket);
    log(`engine host on ${socket} is running: its engines are adopted, not started again`);
  } catch {
    mkdirSync(dirname(socket), { recursive: true });
    const logFile = join(dirname(socket), 'engines.log');
    const fd = openSync(logFile, 'a', 0o600);
    try {
      // Its own group, not a child that dies with us: engines outlive the fleet's agents.
      spawn(process.execPath, [LLMGW_BIN, 'sim-engines', '--socket', socket], { detached: true, stdio: ['ignore', fd, fd] }).unref();
    } finally {
      closeSync(fd);
    }
    conn = await waitForSocket(socket, logFile);
    log(`started the engine host on ${socket} (log ${logFile})`);
  }
  return subscribe(conn, log);
}

async function waitForSocket(path: string, logFile: string): Promise<Socket> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      return await connectSocket(path);
    } catch (error) {
      if (Date.now() > deadline)
        throw new Error(`the engine host did not answer on ${path} within 20 s (see ${logFile})`, { cause: error });
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

async function subscribe(conn: Socket, log: (line: string) => void): Promise<EngineHostClient> {
  const host = new HostMirror(conn, log);
  await host.ask({ op: 'subscribe' });
  await host.tableReady;
  return {
    get enginesPid() {
      return host.enginesPid;
    },
    launcherFor: (scope) => scopedLauncher(host, scope),
    processes: () => [...host.table.values()],
    async killScope(scope) {
      await host.ask({ op: 'kill-scope', scope });
    },
    lost: host.lost,
    close: () => conn.end(),
  };
}

/** The connection to the engine host and the mirror of its process table it keeps current. */
class HostMirror {
  readonly table = new Map<number, VirtualProcess>();
  enginesPid = 0;
  gone = false;
  readonly tableReady: Promise<void>;
  /** Resolves when the engine host is gone (every engine with it). */
  readonly lost: Promise<void>;
  private readonly exits = new Map<number, (exit: ProcessExit) => void>();
  // Exits nobody waited for yet: an engine that fails at once exits before its launch reply.
  private readonly unclaimed = new Map<number, ProcessExit>();
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private tableArrived: () => void = () => undefined;

  constructor(
    private readonly conn: Socket,
    log: (line: string) => void,
  ) {
    this.tableReady = new Promise<void>((resolve) => (this.tableArrived = resolve));
    conn.on(
      'data',
      lineReader(
        (value) => {
          const parsed = Message.safeParse(value);
          if (parsed.success) this.onMessage(parsed.data);
          else log(`engine host sent a malformed message: ${parsed.error.message}`);
        },
        (line, error) => log(`engine host sent an unreadable line (${error}): ${line}`),
      ),
    );
    this.lost = new Promise<void>((resolve) =>
      conn.once('close', () => {
        this.gone = true;
        // The engine host is gone, and every engine with it.
        for (const pid of [...this.table.keys()]) this.exited(pid, { code: null, signal: 'SIGKILL' });
        for (const p of this.pending.values()) p.resolve({ kind: 'reply', id: 0, ok: false, error: 'the engine host is gone' });
        this.pending.clear();
        resolve();
      }),
    );
    conn.on('error', () => undefined);
  }

  ask(body: RequestBody): Promise<Extract<Message, { kind: 'reply' }>> {
    if (this.gone) return Promise.resolve({ kind: 'reply', id: 0, ok: false, error: 'the engine host is gone' });
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.pending.set(id, { resolve });
      this.conn.write(`${JSON.stringify({ ...body, id })}\n`);
    });
  }

  /** How a just-launched process ends, including an end that came before its launch reply. */
  exitOf(pid: number): Promise<ProcessExit> {
    return new Promise<ProcessExit>((resolve) => {
      const early = this.unclaimed.get(pid);
      this.unclaimed.delete(pid);
      if (early) resolve(early);
      else if (this.table.has(pid)) this.exits.set(pid, resolve);
      else resolve({ code: null, signal: this.gone ? 'SIGKILL' : null });
    });
  }

  private onMessage(message: Message): void {
    switch (message.kind) {
      case 'reply':
        this.pending.get(message.id)?.resolve(message);
        this.pending.delete(message.id);
        return;
      case 'table':
        this.enginesPid = message.enginesPid;
        for (const p of message.processes) this.table.set(p.pid, p);
        this.tableArrived();
        return;
      case 'spawned':
        this.table.set(message.process.pid, message.process);
        return;
      case 'exited':
        this.exited(message.pid, { code: message.code, signal: message.signal });
        return;
      default: {
        const unknown: never = message;
        throw new Error(`unknown message ${JSON.stringify(unknown)}`);
      }
    }
  }

  private exited(pid: number, exit: ProcessExit): void {
    this.table.delete(pid);
    const waiter = this.exits.get(pid);
    this.exits.delete(pid);
    if (waiter) return waiter(exit);
    this.unclaimed.set(pid, exit);
    if (this.unclaimed.size > 1000) this.unclaimed.delete(this.unclaimed.keys().next().value!);
  }
}

/** One simulated host's Launcher: it sees, starts and signals only the processes of its scope. */
function scopedLauncher(host: HostMirror, scope: string): Launcher {
  const mine = (pid: number): VirtualProcess | undefined => {
    const p = host.table.get(pid);
    return p?.scope === scope ? p : undefined;
  };
  const tell = (body: RequestBody): void => void host.ask(body);
  return {
    async launch(request): Promise<LaunchedProcess> {
      const reply = await host.ask({
        op: 'launch',
        scope,
        role: request.role,
        argv: request.argv,
        env: request.env,
        logFile: request.logFile,
      });
      if (!reply.ok) throw new Error(`could not start the ${request.role}: ${reply.error}`);
      const pid = reply.pid!;
      return { pid, startTicks: reply.startTicks ?? '', pgid: pid, exited: host.exitOf(pid) };
    },
    listPids: () => [...host.table.values()].filter((p) => p.scope === scope).map((p) => p.pid),
    readStat(pid): ProcStat | undefined {
      const p = mine(pid);
      // Each leads its own group; its parent is gone (an agent that started it may have died).
      return p ? { pid, state: 'S', ppid: 1, pgrp: pid, startTicks: p.startTicks } : undefined;
    },
    readEnviron: (pid) => (mine(pid) ? { ...mine(pid)!.env } : undefined),
    readCmdline: (pid) => (mine(pid) ? [...mine(pid)!.argv] : undefined),
    signalGroup: (pgid, signal) => {
      if (mine(pgid)) tell({ op: 'signal', pid: pgid, group: true, signal: virtualSignal(signal) });
    },
    signalPid: (pid, signal) => {
      if (mine(pid)) tell({ op: 'signal', pid, group: false, signal: virtualSignal(signal) });
    },
    // No virtual process is the agent or one of its ancestors.
    selfAndAncestors: () => new Set<number>(),
  };
}

function virtualSignal(signal: NodeJS.Signals): 'SIGTERM' | 'SIGINT' | 'SIGKILL' {
  if (signal === 'SIGTERM' || signal === 'SIGINT' || signal === 'SIGKILL') return signal;
  throw new Error(`a virtual engine takes SIGTERM, SIGINT or SIGKILL, not ${signal}`);
}
