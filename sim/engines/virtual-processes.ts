// The engine host's process table: the virtual engines it runs, each the fake engine's own code
// under a virtual pid, and the requests sim-fleet sends about them (launch, signal, power off).
// Simulated-fleet side, inside the engine host (host.ts); why pids and signals are virtual is there.
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import type { Socket } from 'node:net';
import { dirname } from 'node:path';
import { runFakeEngine } from '../../fake-engine/main.js';
import type { FakeEngine } from '../../fake-engine/server.js';
import type { Message, Request, VirtualProcess } from './protocol.js';

/** Above Linux's PID_MAX_LIMIT (2^22): a virtual pid can never name a real process. */
const PID_BASE = 5_000_000;

type SignalName = 'SIGTERM' | 'SIGINT' | 'SIGKILL';

interface Running {
  info: VirtualProcess;
  log: WriteStream;
  engine?: FakeEngine;
  handlers: Partial<Record<'SIGTERM' | 'SIGINT', () => void>>;
  exited: boolean;
}

export class VirtualProcesses {
  private readonly boot = Date.now();
  private nextPid = PID_BASE + 1;
  private readonly table = new Map<number, Running>();
  /** Connections that asked for the table and every change to it. */
  readonly subscribers = new Set<Socket>();

  constructor(private readonly say: (line: string) => void) {}

  get size(): number {
    return this.table.size;
  }

  /** Answers one request from sim-fleet; throws what the reply should say went wrong. */
  handle(socket: Socket, request: Request): Message {
    switch (request.op) {
      case 'subscribe':
        this.subscribers.add(socket);
        socket.write(
          `${JSON.stringify({ kind: 'table', enginesPid: process.pid, processes: [...this.table.values()].map((p) => p.info) })}\n`,
        );
        return { kind: 'reply', id: request.id, ok: true };
      case 'launch': {
        const info = this.launch(request);
        return { kind: 'reply', id: request.id, ok: true, pid: info.pid, startTicks: info.startTicks };
      }
      case 'signal': {
        const targets = request.group ? [...this.table.values()].filter((p) => p.info.pid === request.pid) : [this.table.get(request.pid)];
        for (const proc of targets) if (proc) this.signal(proc, request.signal);
        return { kind: 'reply', id: request.id, ok: true };
      }
      case 'kill-scope': {
        const doomed = [...this.table.values()].filter((p) => p.info.scope === request.scope);
        for (const proc of doomed) this.signal(proc, 'SIGKILL');
        this.say(`powered off ${request.scope}: ${doomed.length} engine(s) killed`);
        return { kind: 'reply', id: request.id, ok: true };
      }
      default: {
        const unknown: never = request;
        throw new Error(`unknown request ${JSON.stringify(unknown)}`);
      }
    }
  }

  /** The engine host is going away: every virtual engine dies with it. */
  killAll(): void {
    for (const proc of [...this.table.values()]) this.finish(proc, null, 'SIGKILL');
  }

  private launch(request: Extract<Request, { op: 'launch' }>): VirtualProcess {
    const at = request.argv.indexOf('fake-engine');
    if (at < 0 || at > 2) {
      throw new Error(`a simulated host runs only the fake engine (\`llmgw fake-engine …\`), not ${request.argv.slice(0, 3).join(' ')}`);
    }
    mkdirSync(dirname(request.logFile), { recursive: true });
    const pid = this.nextPid++;
    const info: VirtualProcess = {
      pid,
      scope: request.scope,
      role: request.role,
      argv: request.argv,
      env: request.env,
      startTicks: `${this.boot}${String(pid - PID_BASE).padStart(7, '0')}`,
    };
    const proc: Running = { info, log: createWriteStream(request.logFile, { flags: 'a', mode: 0o600 }), handlers: {}, exited: false };
    this.table.set(pid, proc);
    this.broadcast({ kind: 'spawned', process: info });
    const write = (line: string): void => {
      if (!proc.exited) proc.log.write(`${line}\n`);
    };
    runFakeEngine(request.argv.slice(at + 1), {
      pid,
      env: request.env,
      stdout: write,
      stderr: write,
      exit: (code) => this.finish(proc, code, null),
      onSignal: (signal, handler) => (proc.handlers[signal] = handler),
      onEngine: (engine) => {
        proc.engine = engine;
        if (proc.exited) void engine.close(0).catch(() => undefined);
      },
    }).catch((error: unknown) => {
      write(`fake-engine: ${error instanceof Error ? error.message : String(error)}`);
      this.finish(proc, 1, null);
    });
    return info;
  }

  private signal(proc: Running, name: SignalName): void {
    if (name === 'SIGKILL') return this.finish(proc, null, 'SIGKILL');
    const handler = proc.handlers[name];
    // Before the engine installed its handler a process dies of the signal, as Node's does.
    if (handler) handler();
    else this.finish(proc, null, name);
  }

  private finish(proc: Running, code: number | null, signal: string | null): void {
    if (proc.exited) return;
    proc.exited = true;
    // A dead process's sockets close with it: nothing waits for in-flight requests.
    void proc.engine?.close(0).catch(() => undefined);
    proc.log.end(`--- virtual pid ${proc.info.pid} exited (${signal ?? `code ${code}`}) ---\n`);
    this.table.delete(proc.info.pid);
    this.broadcast({ kind: 'exited', pid: proc.info.pid, code, signal });
  }

  private broadcast(message: Message): void {
    const line = `${JSON.stringify(message)}\n`;
    for (const socket of this.subscribers) socket.write(line);
  }
}
