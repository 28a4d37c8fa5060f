// Starts `temporal server start-dev` with llmgw's search attributes, its data in a file
// under the project's state folder (or in memory), and waits until the frontend answers.
// Used by `llmgw temporal start-dev`, `llmgw up` and the test harness.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, closeSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Connection } from '@temporalio/client';
import { devServerSearchAttributeFlags } from './search-attributes.js';
import { ensureTemporalCli } from './cli-binary.js';
import { findFreePortAvoiding, isPortFree } from '../common/ports.js';
import { DEFAULT_PORTS } from '../common/names.js';

export interface DevServerOptions {
  port?: number;
  uiPort?: number;
  /** No Web UI (tests). */
  headless?: boolean;
  /** SQLite file; ignored with inMemory. Default: <stateDir>/temporal/dev.db */
  dbFile?: string;
  inMemory?: boolean;
  ip?: string;
  stateDir?: string;
  logFile?: string;
  temporalBin?: string;
  /** How long to wait for the frontend. */
  readyTimeoutMs?: number;
  /** Dynamic config values on top of llmgw's (KEY → JSON value). */
  dynamicConfig?: Record<string, string | number | boolean>;
  /** Ports the caller has promised to other processes: the ports chosen here avoid them. */
  reservedPorts?: (port: number) => boolean;
}

export interface DevServer {
  address: string;
  uiUrl: string | undefined;
  pid: number;
  dbFile: string | undefined;
  logFile: string;
  /** The server's Prometheus metrics (the `action` counter is what Temporal Cloud bills). */
  metricsUrl: string;
  /** Resolves when the server process has exited. */
  exited: Promise<number | null>;
  stop(): Promise<void>;
}

export function defaultStateDir(): string {
  return resolve(process.env.LLMGW_STATE_DIR ?? '.llmgw');
}

/**
 * Starts one; when a port it chose for itself (HTTP, metrics) was taken by another process
 * between the choice and the bind, chooses again, twice at most (seen with many servers starting
 * side by side on a busy machine).
 */
export async function startDevServer(options: DevServerOptions = {}): Promise<DevServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startDevServerOnce(options);
    } catch (error) {
      const lost = error instanceof Error && /address already in use/.test(error.message);
      if (!lost || attempt >= 3) throw error;
    }
  }
}

async function startDevServerOnce(options: DevServerOptions): Promise<DevServer> {
  const temporalBin = options.temporalBin ?? (await ensureTemporalCli());
  const ip = options.ip ?? '127.0.0.1';
  const port = options.port ?? DEFAULT_PORTS.temporal;
  if (!(await isPortFree(port, ip))) {
    throw new Error(
      `port ${port} on ${ip} is taken: is a Temporal server already running? Use it with TEMPORAL_ADDRESS=${ip}:${port}, or choose another --port.`,
    );
  }
  const stateDir = options.stateDir ?? defaultStateDir();
  const dbFile = options.inMemory ? undefined : resolve(options.dbFile ?? `${stateDir}/temporal/dev.db`);
  const logFile = resolve(options.logFile ?? `${stateDir}/temporal/dev-server.log`);
  mkdirSync(dirname(logFile), { recursive: true });
  if (dbFile) mkdirSync(dirname(dbFile), { recursive: true });

  const args = ['server', 'start-dev', '--ip', ip, '--port', String(port), '--log-level', 'warn', ...devServerSearchAttributeFlags()];
  // Every port start-dev opens is chosen here, so that several servers (tests, clones)
  // can share a machine without colliding on the defaults.
  // Its own frontend and UI ports too: chosen by the caller, bound only once the server runs.
  const uiPortWanted = options.headless ? undefined : (options.uiPort ?? DEFAULT_PORTS.webUi);
  const reserved = (p: number): boolean => p === port || p === uiPortWanted || (options.reservedPorts?.(p) ?? false);
  const metricsPort = await findFreePortAvoiding(reserved, ip);
  const httpPort = await findFreePortAvoiding((p) => reserved(p) || p === metricsPort, ip);
  args.push('--http-port', String(httpPort), '--metrics-port', String(metricsPort));
  let uiUrl: string | undefined;
  if (options.headless) {
    args.push('--headless');
  } else {
    const uiPort = options.uiPort ?? DEFAULT_PORTS.webUi;
    args.push('--ui-port', String(uiPort));
    uiUrl = `http://${ip === '0.0.0.0' ? '127.0.0.1' : ip}:${uiPort}`;
  }
  if (dbFile) args.push('--db-filename', dbFile);
  args.push(...dynamicConfigFlags(options.dynamicConfig ?? {}));

  const logFd = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn(temporalBin, args, { stdio: ['ignore', logFd, logFd], detached: true });
  } finally {
    closeSync(logFd);
  }
  const pid = child.pid;
  if (pid === undefined) throw new Error(`could not start ${temporalBin}`);
  const exited = new Promise<number | null>((resolveExit) => child.once('exit', (code) => resolveExit(code)));
  let hasExited = false;
  void exited.then(() => (hasExited = true));

  const address = `${ip === '0.0.0.0' ? '127.0.0.1' : ip}:${port}`;
  await waitForFrontend(address, pid, () => hasExited, logFile, options.readyTimeoutMs ?? 60_000);

  return {
    address,
    uiUrl,
    pid,
    dbFile,
    logFile,
    metricsUrl: `http://${ip === '0.0.0.0' ? '127.0.0.1' : ip}:${metricsPort}/metrics`,
    exited,
    async stop() {
      if (hasExited) return;
      killGroup(pid, 'SIGTERM');
      const timer = setTimeout(() => killGroup(pid, 'SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

function dynamicConfigFlags(extra: Record<string, string | number | boolean>): string[] {
  return [
    // Search attributes are written by workflows at every state change; the dev server's
    // default visibility is fine, but make new attributes usable at once.
    '--dynamic-config-value',
    'system.forceSearchAttributesCacheRefreshOnRead=true',
    // Worker heartbeats and ListWorkers: how the control worker sees a dead agent within seconds
    // without billing an activity heartbeat (workers/liveness.ts).
    '--dynamic-config-value',
    'frontend.WorkerHeartbeatsEnabled=true',
    '--dynamic-config-value',
    'frontend.ListWorkersEnabled=true',
    ...Object.entries(extra).flatMap(([key, value]) => ['--dynamic-config-value', `${key}=${JSON.stringify(value)}`]),
  ];
}

/** Polls until the frontend answers; kills the server's group if it has not within `timeoutMs`. */
async function waitForFrontend(address: string, pid: number, hasExited: () => boolean, logFile: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (hasExited())
      throw new Error(`temporal server start-dev exited before it answered; its log (${logFile}) ends:\n${tail(logFile, 20)}`);
    if (await frontendAnswers(address)) return;
    if (Date.now() > deadline) {
      killGroup(pid, 'SIGKILL');
      throw new Error(`temporal server start-dev did not answer on ${address} within ${timeoutMs} ms; log: ${logFile}`);
    }
    await sleep(200);
  }
}

export async function frontendAnswers(address: string): Promise<boolean> {
  let connection: Connection | undefined;
  try {
    connection = await Connection.connect({ address, connectTimeout: 1_000 });
    await connection.workflowService.getSystemInfo({});
    return true;
  } catch {
    return false;
  } finally {
    await connection?.close().catch(() => undefined);
  }
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // Already gone.
  }
}

function tail(file: string, lines: number): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
