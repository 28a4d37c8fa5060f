// `llmgw fake-engine …`: the fake engine as a process. Parses a vLLM-style argv, starts the
// server, applies the fault injections that need a process (crash, fail to start, lose the
// leader) and shuts down cleanly on SIGTERM. Engine side; the agent spawns it.
import { ENGINE_MARKER_ENV, LORA_SOURCES_ENV, SIM_GPU_LEDGER_ENV } from '../common/names.js';
import { loraSources } from './lora.js';
import { FakeEngineArgsError, parseFakeEngineArgs, type FakeEngineOptions } from './options.js';
import { startFakeEngine, type FakeEngine } from './server.js';
import { DEFAULT_WEIGHTS_LOAD_RATE, weightsBytes } from './weights.js';

/** Exit codes the agent and tests can tell apart. */
export const FakeEngineExit = {
  ok: 0,
  /** Bad arguments, as argparse (and so vLLM) exits; or --fail-start. */
  cannotStart: 2,
  /** --crash-after fired. */
  crashed: 3,
  /** A worker rank lost (or never reached) its leader. */
  leaderLost: 4,
} as const;

export type FakeEngineExitCode = (typeof FakeEngineExit)[keyof typeof FakeEngineExit];

/** What the engine needs from its process; tests pass a recording one. */
export interface FakeEngineProcess {
  stdout(line: string): void;
  stderr(line: string): void;
  exit(code: number): void;
  env: NodeJS.ProcessEnv;
  onSignal(signal: 'SIGTERM' | 'SIGINT', handler: () => void): void;
  /** The pid the engine reports (a virtual engine's is not the process's). */
  pid?: number;
  /** Called once the engine serves: an in-process host (sim/) must be able to cut it off. */
  onEngine?(engine: FakeEngine): void;
}

export const nodeProcess: FakeEngineProcess = {
  stdout: (line) => process.stdout.write(`${line}\n`),
  stderr: (line) => process.stderr.write(`${line}\n`),
  exit: (code) => process.exit(code),
  env: process.env,
  onSignal: (signal, handler) => process.once(signal, handler),
};

const SHUTDOWN_GRACE_MS = 2000;

/**
 * Runs the fake engine until a signal or an injected fault ends it (through `proc.exit`).
 * Resolves once the engine is serving, or once it has decided not to start.
 */
export async function runFakeEngine(argv: string[], proc: FakeEngineProcess = nodeProcess): Promise<void> {
  let opts: FakeEngineOptions;
  try {
    opts = parseFakeEngineArgs(argv);
    // Like vLLM, the key may come from the environment, where other local users cannot read it.
    if (opts.apiKey === undefined && proc.env.VLLM_API_KEY) opts.apiKey = proc.env.VLLM_API_KEY;
    // As vLLM reads it: the dev routes (sleep among them) only with VLLM_SERVER_DEV_MODE=1.
    if (proc.env.VLLM_SERVER_DEV_MODE === '1') opts.devMode = true;
    const ledger = simulatedGpus(proc);
    if (ledger !== undefined) opts.simulatedGpus = ledger;
    const sources = proc.env[LORA_SOURCES_ENV];
    if (opts.lora !== undefined && sources !== undefined) {
      const allowedSources = loraSources(sources);
      if (allowedSources === undefined) throw new FakeEngineArgsError(`${LORA_SOURCES_ENV} must be a JSON array of adapter paths`);
      opts.lora = { ...opts.lora, allowedSources };
    }
  } catch (err) {
    if (!(err instanceof FakeEngineArgsError)) throw err;
    proc.stderr(`fake-engine: ${err.message}`);
    return proc.exit(FakeEngineExit.cannotStart);
  }

  proc.stdout(`fake-engine: pid ${proc.pid ?? process.pid} CUDA_VISIBLE_DEVICES=${proc.env.CUDA_VISIBLE_DEVICES ?? '(unset)'}`);
  for (const name of opts.printEnv) proc.stdout(`fake-engine: ${name}=${proc.env[name] ?? '(unset)'}`);
  if (opts.failStart) {
    proc.stderr(`fake-engine: failed to load model ${opts.model} (--fail-start)`);
    return proc.exit(FakeEngineExit.cannotStart);
  }

  if (opts.weights !== undefined) {
    const loadTimeS = weightsLoadTime(opts.weights, opts.weightsLoadRate, proc);
    if (loadTimeS === undefined) return proc.exit(FakeEngineExit.cannotStart);
    opts = { ...opts, loadTimeS: opts.loadTimeS + loadTimeS };
  }

  // A fault (crash, lost leader) ends a real process at once; with a recording process a
  // later signal must still close the engine, so the two are tracked apart.
  const ending: Ending = { faulted: false, shuttingDown: false };
  const fault = (message: string, code: FakeEngineExitCode): void => {
    if (ending.faulted || ending.shuttingDown) return;
    ending.faulted = true;
    proc.stderr(`fake-engine: ${message}`);
    proc.exit(code);
  };
  let engine: FakeEngine;
  try {
    engine = await startFakeEngine(opts, {
      log: proc.stdout,
      onLeaderLost: (reason) => fault(`exiting, ${reason}`, FakeEngineExit.leaderLost),
    });
  } catch (err) {
    proc.stderr(`fake-engine: cannot start: ${(err as Error).message}`);
    return proc.exit(FakeEngineExit.cannotStart);
  }
  proc.onEngine?.(engine);

  const after = opts.crashAfterS;
  const crashTimer =
    after === undefined
      ? undefined
      : setTimeout(() => fault(`crashing after ${after}s (--crash-after)`, FakeEngineExit.crashed), after * 1000);
  const shutdown = (signal: string) => () => {
    if (ending.shuttingDown) return;
    ending.shuttingDown = true;
    if (crashTimer) clearTimeout(crashTimer);
    stopGracefully(engine, signal, proc);
  };
  proc.onSignal('SIGTERM', shutdown('SIGTERM'));
  proc.onSignal('SIGINT', shutdown('SIGINT'));
}

/** The simulated GPUs this engine's memory is accounted on: its agent's ledger and CUDA_VISIBLE_DEVICES. */
function simulatedGpus(proc: FakeEngineProcess): FakeEngineOptions['simulatedGpus'] {
  const ledgerDir = proc.env[SIM_GPU_LEDGER_ENV];
  const visible = proc.env.CUDA_VISIBLE_DEVICES;
  if (!ledgerDir || !visible) return undefined;
  const gpus = visible.split(',').map(Number);
  if (gpus.some((gpu) => !Number.isInteger(gpu) || gpu < 0)) return undefined;
  const pid = proc.pid ?? process.pid;
  return { ledgerDir, gpus, key: proc.env[ENGINE_MARKER_ENV.shardId] ?? `pid-${pid}`, pid };
}

interface Ending {
  faulted: boolean;
  shuttingDown: boolean;
}

/** Seconds that reading the weights under `dir` takes at `rate`, or undefined (said on stderr) when they cannot be read. */
function weightsLoadTime(dir: string, rate: number | undefined, proc: FakeEngineProcess): number | undefined {
  try {
    const found = weightsBytes(dir);
    const seconds = found.bytes / (rate ?? DEFAULT_WEIGHTS_LOAD_RATE);
    proc.stdout(`fake-engine: loading ${found.files} weight files (${found.bytes} bytes) from ${dir}: ${seconds.toFixed(2)} s`);
    return seconds;
  } catch (err) {
    proc.stderr(`fake-engine: cannot load the weights: ${(err as Error).message}`);
    return undefined;
  }
}

function stopGracefully(engine: FakeEngine, signal: string, proc: FakeEngineProcess): void {
  proc.stdout(`fake-engine: ${signal}, finishing in-flight requests`);
  void engine.close(SHUTDOWN_GRACE_MS).then(
    () => {
      proc.stdout('fake-engine: stopped');
      proc.exit(FakeEngineExit.ok);
    },
    (err: unknown) => {
      proc.stderr(`fake-engine: error while stopping: ${(err as Error).message}`);
      proc.exit(FakeEngineExit.ok);
    },
  );
}
