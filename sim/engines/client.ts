// sim-fleet's end of the engine host (host.ts): starts it when none serves the fleet's socket,
// keeps a mirror of its process table, and gives each simulated host a Launcher over its own
// part of it. Simulated-fleet side. The supervisor asks a launcher synchronously (like /proc),
// so it reads the mirror, which the engine host keeps current with every spawn and exit.
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import type { LaunchedProcess, Launcher, ProcessExit } from '../../agent/supervisor/launcher.js';
import type { ProcStat } from '../../agent/supervisor/process-table.js';
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
  const table = new Map<number, VirtualProcess>();
  const exits = new Map<number, (exit: ProcessExit) => void>();
  // Exits nobody waited for yet: an engine that fails at once exits before its launch reply.
  const unclaimed = new Map<number, ProcessExit>();
  const pending = new Map<number, Pending>();
  let nextId = 1;
  let enginesPid = 0;
  let gone = false;
  let tableArrived: () => void = () => undefined;
  const tableReady = new Promise<void>((resolve) => (tableArrived = resolve));

  const exited = (pid: number, exit: ProcessExit): void => {
    table.delete(pid);
    const waiter = exits.get(pid);
    exits.delete(pid);
    if (waiter) return waiter(exit);
    unclaimed.set(pid, exit);
    if (unclaimed.size > 1000) unclaimed.delete(unclaimed.keys().next().value!);
  };
  const onMessage = (message: Message): void => {
    switch (message.kind) {
      case 'reply':
        pending.get(message.id)?.resolve(message);
        pending.delete(message.id);
        return;
      case 'table':
        enginesPid = message.enginesPid;
        for (const p of message.processes) table.set(p.pid, p);
        tableArrived();
        return;
      case 'spawned':
        table.set(message.process.pid, message.process);
        return;
      case 'exited':
        exited(message.pid, { code: message.code, signal: message.signal });
        return;
      default: {
        const unknown: never = message;
        throw new Error(`unknown message ${JSON.stringify(unknown)}`);
      }
    }
  };
  conn.on(
    'data',
    lineReader(
      (value) => {
        const parsed = Message.safeParse(value);
        if (parsed.success) onMessage(parsed.data);
        else log(`engine host sent a malformed message: ${parsed.error.message}`);
      },
      (line, error) => log(`engine host sent an unreadable line (${error}): ${line}`),
    ),
  );
  const lost = new Promise<void>((resolve) =>
    conn.once('close', () => {
      gone = true;
      // The engine host is gone, and every engine with it.
      for (const pid of [...table.keys()]) exited(pid, { code: null, signal: 'SIGKILL' });
      for (const p of pending.values()) p.resolve({ kind: 'reply', id: 0, ok: false, error: 'the engine host is gone' });
      pending.clear();
      resolve();
    }),
  );
  conn.on('error', () => undefined);

  const ask = (body: RequestBody): Promise<Extract<Message, { kind: 'reply' }>> => {
    if (gone) return Promise.resolve({ kind: 'reply', id: 0, ok: false, error: 'the engine host is gone' });
    const id = nextId++;
    return new Promise((resolve) => {
      pending.set(id, { resolve });
      conn.write(`${JSON.stringify({ ...body, id })}\n`);
    });
  };
  const tell = (body: RequestBody): void => void ask(body);

  await ask({ op: 'subscribe' });
  await tableReady;

  const launcherFor = (scope: string): Launcher => {
    const mine = (pid: number): VirtualProcess | undefined => {
      const p = table.get(pid);
      return p?.scope === scope ? p : undefined;
    };
    return {
      async launch(request): Promise<LaunchedProcess> {
        const reply = await ask({
          op: 'launch',
          scope,
          role: request.role,
          argv: request.argv,
          env: request.env,
          logFile: request.logFile,
        });
        if (!reply.ok) throw new Error(`could not start the ${request.role}: ${reply.error}`);
        const pid = reply.pid!;
        const exited = new Promise<ProcessExit>((resolve) => {
          const early = unclaimed.get(pid);
          unclaimed.delete(pid);
          if (early) resolve(early);
          else if (table.has(pid)) exits.set(pid, resolve);
          else resolve({ code: null, signal: gone ? 'SIGKILL' : null });
        });
        return { pid, startTicks: reply.startTicks ?? '', pgid: pid, exited };
      },
      listPids: () => [...table.values()].filter((p) => p.scope === scope).map((p) => p.pid),
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
  };

  return {
    get enginesPid() {
      return enginesPid;
    },
    launcherFor,
    processes: () => [...table.values()],
    async killScope(scope) {
      await ask({ op: 'kill-scope', scope });
    },
    lost,
    close: () => conn.end(),
  };
}

function virtualSignal(signal: NodeJS.Signals): 'SIGTERM' | 'SIGINT' | 'SIGKILL' {
  if (signal === 'SIGTERM' || signal === 'SIGINT' || signal === 'SIGKILL') return signal;
  throw new Error(`a virtual engine takes SIGTERM, SIGINT or SIGKILL, not ${signal}`);
}
