// llama.cpp's llama-server for tests: finds the binary and the Gemma 3 270M GGUF, starts it on a
// free 127.0.0.1 port in its own process group (what /health answered while it loaded is
// recorded), and stops that group, and only it.
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { llamaServerCacheDir } from '../../agent/engines/llamacpp-binary.js';
import { GEMMA_FILE, gemmaModelDir } from '../../common/gemma-gguf.js';
import { signalGroup } from '../../agent/supervisor/processes/proc.js';
import { findFreePort } from '../../common/ports.js';
import { healthUntilReady } from './openai-wire.js';

/** LLMGW_LLAMA_SERVER, else the one the test setup installed into the engine cache. */
export function llamaServerBinary(): string {
  return process.env.LLMGW_LLAMA_SERVER ?? join(llamaServerCacheDir(), 'llama-server');
}

/** LLMGW_GEMMA_GGUF, else the one the test setup assembled. */
export function gemmaGguf(): string {
  return process.env.LLMGW_GEMMA_GGUF ?? join(gemmaModelDir(), GEMMA_FILE);
}

/** What is missing to run llama-server here, with what to run about it; undefined when nothing is. */
export function llamaServerMissing(): string | undefined {
  const bin = llamaServerBinary();
  if (!existsSync(bin)) return `no llama-server at ${bin}: run \`llmgw engines install llamacpp\` (or set LLMGW_LLAMA_SERVER)`;
  const gguf = gemmaGguf();
  if (!existsSync(gguf)) return `no Gemma 3 270M GGUF at ${gguf}: run \`llmgw engines install llamacpp\` (or set LLMGW_GEMMA_GGUF)`;
  return undefined;
}

export interface LlamaServer {
  pid: number;
  port: number;
  base: string;
  alias: string;
  /** What /health answered between the spawn and the first 200 (0: not listening yet). */
  healthBeforeReady: number[];
  logFile: string;
  /** SIGTERM to its process group, SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
}

export async function startLlamaServer(opts: {
  alias: string;
  parallel?: number;
  ctxSize?: number;
  readyTimeoutMs?: number;
}): Promise<LlamaServer> {
  const port = await findFreePort();
  const logDir = join('.llmgw', 'test');
  mkdirSync(logDir, { recursive: true });
  const logFile = join(logDir, `llama-server-${port}.log`);
  const log = openSync(logFile, 'w');
  const args = [
    ...['-m', gemmaGguf(), '--host', '127.0.0.1', '--port', String(port), '--alias', opts.alias],
    ...['--parallel', String(opts.parallel ?? 2), '--ctx-size', String(opts.ctxSize ?? 4096), '--metrics', '--threads', '1'],
    // No repacked weights: on a CPU with AMX in a VM that does not grant the tile state (a
    // Firecracker VM, for one), ggml's AMX matmul segfaults in the warm-up. A 270M model does
    // not need the speed.
    '--no-repack',
  ];
  // Its own process group: stop() signals that group, never anything this test did not start.
  const child = spawn(llamaServerBinary(), args, { stdio: ['ignore', log, log], detached: true });
  closeSync(log);
  let exit: string | undefined;
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      exit = `exit ${code ?? signal}`;
      resolve();
    }),
  );
  child.once('error', (err) => (exit = err.message));
  const pid = child.pid;
  if (pid === undefined) throw new Error(`cannot start ${llamaServerBinary()}: ${exit ?? 'no pid'}`);
  const base = `http://127.0.0.1:${port}`;

  const stop = async (graceMs = 5000) => {
    if (exit !== undefined) return;
    signalGroup(pid, 'SIGTERM');
    const timer = setTimeout(() => signalGroup(pid, 'SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };

  try {
    const healthBeforeReady = await healthUntilReady(base, opts.readyTimeoutMs ?? 120_000, () => exit);
    return { pid, port, base, alias: opts.alias, healthBeforeReady, logFile, stop };
  } catch (err) {
    await stop(1000);
    const tail = readFileSync(logFile, 'utf8').split('\n').slice(-15).join('\n');
    throw new Error(`${(err as Error).message}\n--- ${logFile} ---\n${tail}`, { cause: err });
  }
}
