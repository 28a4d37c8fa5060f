// `llmgw sim-engines --socket PATH`: the engine host of a simulated fleet, where its virtual
// engines live. Simulated-fleet side, its own long-lived process (sim-fleet starts it).
//
// THE PROCESS BOUNDARY, AND HOW IT DIFFERS. A real agent spawns each engine as a process
// of its own, which outlives the agent. Here an engine is the fake engine's own code
// (fake-engine/main.ts runFakeEngine: its server, options and metrics) run inside this
// process, with its own HTTP port and log file, under a virtual pid. What differs:
//   - pids are virtual, from 5,000,000 up (above Linux's largest pid, so never a real one),
//     each leading its own group; start ticks are this host's boot time and a counter, so a
//     pid recorded before an engine-host restart is never mistaken for a new one;
//   - "signals" are messages: SIGTERM/SIGINT run the engine's own handler (a graceful stop),
//     SIGKILL closes its server and connections at once; an exit is reported, not reaped;
//   - only the fake engine runs (argv `… fake-engine ARGS`); anything else fails to start;
//   - the table (/proc of each simulated host) is this process's, sent to sim-fleet as it
//     changes (protocol.ts); each host sees only its own processes (its scope).
// Engines live here and not in sim-fleet so that they outlive it, as real engines outlive
// their agent: a restarted sim-fleet adopts them, still serving. Killing this process is a
// power cut of the whole fleet.
import { createWriteStream, mkdirSync, rmSync, type WriteStream } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { dirname } from 'node:path';
import { runFakeEngine } from '../../fake-engine/main.js';
import type { FakeEngine } from '../../fake-engine/server.js';
import { lineReader, Request, type Message, type VirtualProcess } from './protocol.js';

/** Above Linux's PID_MAX_LIMIT (2^22): a virtual pid can never name a real process. */
const PID_BASE = 5_000_000;
const IDLE_CHECK_MS = 5_000;

interface Running {
  info: VirtualProcess;
  log: WriteStream;
  engine?: FakeEngine;
  handlers: Partial<Record<'SIGTERM' | 'SIGINT', () => void>>;
  exited: boolean;
}

export interface EngineHostOptions {
  socket: string;
  log?: (line: string) => void;
}

export async function runEngineHost(options: EngineHostOptions): Promise<void> {
  const say = options.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  const boot = Date.now();
  let nextPid = PID_BASE + 1;
  const table = new Map<number, Running>();
  const subscribers = new Set<Socket>();

  const broadcast = (message: Message): void => {
    const line = `${JSON.stringify(message)}\n`;
    for (const socket of subscribers) socket.write(line);
  };

  const finish = (proc: Running, code: number | null, signal: string | null): void => {
    if (proc.exited) return;
    proc.exited = true;
    // A dead process's sockets close with it: nothing waits for in-flight requests.
    void proc.engine?.close(0).catch(() => undefined);
    proc.log.end(`--- virtual pid ${proc.info.pid} exited (${signal ?? `code ${code}`}) ---\n`);
    table.delete(proc.info.pid);
    broadcast({ kind: 'exited', pid: proc.info.pid, code, signal });
  };

  const launch = (request: Extract<Request, { op: 'launch' }>): VirtualProcess => {
    const at = request.argv.indexOf('fake-engine');
    if (at < 0 || at > 2) {
      throw new Error(`a simulated host runs only the fake engine (\`llmgw fake-engine …\`), not ${request.argv.slice(0, 3).join(' ')}`);
    }
    mkdirSync(dirname(request.logFile), { recursive: true });
    const pid = nextPid++;
    const info: VirtualProcess = {
      pid,
      scope: request.scope,
      role: request.role,
      argv: request.argv,
      env: request.env,
      startTicks: `${boot}${String(pid - PID_BASE).padStart(7, '0')}`,
    };
    const proc: Running = { info, log: createWriteStream(request.logFile, { flags: 'a', mode: 0o600 }), handlers: {}, exited: false };
    table.set(pid, proc);
    broadcast({ kind: 'spawned', process: info });
    const write = (line: string): void => {
      if (!proc.exited) proc.log.write(`${line}\n`);
    };
    runFakeEngine(request.argv.slice(at + 1), {
      pid,
      env: request.env,
      stdout: write,
      stderr: write,
      exit: (code) => finish(proc, code, null),
      onSignal: (signal, handler) => (proc.handlers[signal] = handler),
      onEngine: (engine) => {
        proc.engine = engine;
        if (proc.exited) void engine.close(0).catch(() => undefined);
      },
    }).catch((error: unknown) => {
      write(`fake-engine: ${error instanceof Error ? error.message : String(error)}`);
      finish(proc, 1, null);
    });
    return info;
  };

  const signal = (proc: Running, name: 'SIGTERM' | 'SIGINT' | 'SIGKILL'): void => {
    if (name === 'SIGKILL') return finish(proc, null, 'SIGKILL');
    const handler = proc.handlers[name];
    // Before the engine installed its handler a process dies of the signal, as Node's does.
    if (handler) handler();
    else finish(proc, null, name);
  };

  const handle = (socket: Socket, request: Request): Message => {
    switch (request.op) {
      case 'subscribe':
        subscribers.add(socket);
        socket.write(`${JSON.stringify({ kind: 'table', enginesPid: process.pid, processes: [...table.values()].map((p) => p.info) })}\n`);
        return { kind: 'reply', id: request.id, ok: true };
      case 'launch': {
        const info = launch(request);
        return { kind: 'reply', id: request.id, ok: true, pid: info.pid, startTicks: info.startTicks };
      }
      case 'signal': {
        const targets = request.group ? [...table.values()].filter((p) => p.info.pid === request.pid) : [table.get(request.pid)];
        for (const proc of targets) if (proc) signal(proc, request.signal);
        return { kind: 'reply', id: request.id, ok: true };
      }
      case 'kill-scope': {
        const doomed = [...table.values()].filter((p) => p.info.scope === request.scope);
        for (const proc of doomed) signal(proc, 'SIGKILL');
        say(`powered off ${request.scope}: ${doomed.length} engine(s) killed`);
        return { kind: 'reply', id: request.id, ok: true };
      }
      default: {
        const unknown: never = request;
        throw new Error(`unknown request ${JSON.stringify(unknown)}`);
      }
    }
  };

  rmSync(options.socket, { force: true });
  mkdirSync(dirname(options.socket), { recursive: true });
  const server = createServer((socket) => {
    socket.on('error', () => undefined);
    socket.on('close', () => subscribers.delete(socket));
    socket.on(
      'data',
      lineReader(
        (value) => {
          const parsed = Request.safeParse(value);
          if (!parsed.success) return say(`ignored a malformed request: ${parsed.error.message}`);
          let reply: Message;
          try {
            reply = handle(socket, parsed.data);
          } catch (error) {
            reply = { kind: 'reply', id: parsed.data.id, ok: false, error: error instanceof Error ? error.message : String(error) };
          }
          socket.write(`${JSON.stringify(reply)}\n`);
        },
        (line, error) => say(`ignored an unreadable line (${error}): ${line}`),
      ),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.socket, () => resolve());
  });
  say(`engine host ${process.pid} serving virtual engines on ${options.socket}`);

  await new Promise<void>((resolve) => {
    const stop = (why: string): void => {
      say(`${why}: every virtual engine ends with this process`);
      for (const proc of [...table.values()]) finish(proc, null, 'SIGKILL');
      clearInterval(idle);
      server.close();
      rmSync(options.socket, { force: true });
      resolve();
    };
    // Nobody to serve and nothing running: a fleet that was stopped and whose engines are gone.
    let idleChecks = 0;
    const idle = setInterval(() => {
      idleChecks = subscribers.size === 0 && table.size === 0 ? idleChecks + 1 : 0;
      if (idleChecks >= 2) stop('no fleet connected and no engine running');
    }, IDLE_CHECK_MS);
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}
