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
//   - the table (/proc of each simulated host, virtual-processes.ts) is this process's, sent
//     to sim-fleet as it changes (protocol.ts); each host sees only its own processes (its scope).
// Engines live here and not in sim-fleet so that they outlive it, as real engines outlive
// their agent: a restarted sim-fleet adopts them, still serving. Killing this process is a
// power cut of the whole fleet.
import { mkdirSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { dirname } from 'node:path';
import { lineReader, Request, type Message } from './protocol.js';
import { VirtualProcesses } from './virtual-processes.js';

const IDLE_CHECK_MS = 5_000;

export interface EngineHostOptions {
  socket: string;
  log?: (line: string) => void;
}

export async function runEngineHost(options: EngineHostOptions): Promise<void> {
  const say = options.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  const processes = new VirtualProcesses(say);

  rmSync(options.socket, { force: true });
  mkdirSync(dirname(options.socket), { recursive: true });
  const server = createServer((socket) => serveConnection(socket, processes, say));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.socket, () => resolve());
  });
  say(`engine host ${process.pid} serving virtual engines on ${options.socket}`);
  await untilStopped(server, options.socket, processes, say);
}

/** One sim-fleet connection: a request a line, a reply a line. */
function serveConnection(socket: Socket, processes: VirtualProcesses, say: (line: string) => void): void {
  socket.on('error', () => undefined);
  socket.on('close', () => processes.subscribers.delete(socket));
  socket.on(
    'data',
    lineReader(
      (value) => {
        const parsed = Request.safeParse(value);
        if (!parsed.success) return say(`ignored a malformed request: ${parsed.error.message}`);
        let reply: Message;
        try {
          reply = processes.handle(socket, parsed.data);
        } catch (error) {
          reply = { kind: 'reply', id: parsed.data.id, ok: false, error: error instanceof Error ? error.message : String(error) };
        }
        socket.write(`${JSON.stringify(reply)}\n`);
      },
      (line, error) => say(`ignored an unreadable line (${error}): ${line}`),
    ),
  );
}

/** Resolves when the host is told to stop, or has been idle twice running; every engine ends then. */
function untilStopped(server: Server, socketPath: string, processes: VirtualProcesses, say: (line: string) => void): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = (why: string): void => {
      say(`${why}: every virtual engine ends with this process`);
      processes.killAll();
      clearInterval(idle);
      server.close();
      rmSync(socketPath, { force: true });
      resolve();
    };
    // Nobody to serve and nothing running: a fleet that was stopped and whose engines are gone.
    let idleChecks = 0;
    const idle = setInterval(() => {
      idleChecks = processes.subscribers.size === 0 && processes.size === 0 ? idleChecks + 1 : 0;
      if (idleChecks >= 2) stop('no fleet connected and no engine running');
    }, IDLE_CHECK_MS);
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
}
