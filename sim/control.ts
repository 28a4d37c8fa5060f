// The simulated fleet's control socket: a Unix socket that takes one command a line
// (`kill sim-3 sim-4`, `kill-agent sim-5`, `start sim-3`, `status`, `engines`) and answers
// each with one JSON line. Both ends: the server sim-fleet runs, and the client that
// `llmgw sim-ctl`, tests and benchmarks use.
import { mkdirSync, rmSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { dirname } from 'node:path';

export type ControlHandler = (command: string, args: string[]) => Promise<unknown>;

export const CONTROL_COMMANDS = {
  kill: 'kill NODE…: the hosts die (agent and engines): Temporal sees them go silent',
  'kill-agent': 'kill-agent NODE…: only the agents die; their engines keep serving',
  start: 'start NODE…: bring killed hosts (or agents) back; they adopt what still runs',
  status: 'status: every host and its state, the fleet process RSS',
  engines: 'engines: every virtual engine (node, pid, shard, port, CUDA_VISIBLE_DEVICES)',
} as const;

export async function serveControl(path: string, handler: ControlHandler): Promise<Server> {
  rmSync(path, { force: true });
  mkdirSync(dirname(path), { recursive: true });
  const server = createServer((socket) => {
    socket.on('error', () => undefined);
    let buffered = '';
    // One command at a time per connection, answered in order.
    let queue = Promise.resolve();
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      let newline: number;
      while ((newline = buffered.indexOf('\n')) >= 0) {
        const words = buffered.slice(0, newline).trim().split(/\s+/).filter(Boolean);
        buffered = buffered.slice(newline + 1);
        const [command, ...args] = words;
        if (command === undefined) continue;
        queue = queue.then(async () => {
          let answer: unknown;
          try {
            if (!(command in CONTROL_COMMANDS))
              throw new Error(`unknown command ${command}; commands: ${Object.keys(CONTROL_COMMANDS).join(', ')}`);
            answer = { ok: true, ...((await handler(command, args)) as object) };
          } catch (error) {
            answer = { ok: false, error: error instanceof Error ? error.message : String(error) };
          }
          if (!socket.destroyed) socket.write(`${JSON.stringify(answer)}\n`);
        });
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => resolve());
  });
  return server;
}

/** Sends one command line and resolves with its answer; rejects when the fleet says it failed. */
export function controlRequest(path: string, line: string, timeoutMs = 60_000): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    let buffered = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the fleet on ${path} did not answer ${JSON.stringify(line)} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`cannot reach the fleet's control socket ${path}: ${error.message}`));
    });
    socket.once('connect', () => socket.write(`${line}\n`));
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const newline = buffered.indexOf('\n');
      if (newline < 0) return;
      clearTimeout(timer);
      socket.end();
      const answer = JSON.parse(buffered.slice(0, newline)) as Record<string, unknown>;
      if (answer.ok === true) resolve(answer);
      else reject(new Error(String(answer.error)));
    });
  });
}
