// Temporal on PostgreSQL in one call: the pinned server and SQL tool (built once), the
// databases (llmgw's private cluster or LLMGW_POSTGRES_URL), the schema, a one-node
// server config, the namespace and llmgw's search attributes, and a wait until the
// server accepts workflows. Used by `llmgw temporal start-postgres`, benchmarks and tests.
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ensureTemporalCli } from '../cli-binary.js';
import { defaultStateDir } from '../dev-server.js';
import { findFreePort, isPortFree } from '../../common/ports.js';
import { DEFAULT_PORTS } from '../../common/names.js';
import type { Log } from '../go-install.js';
import { withoutTemporalEnv } from './exec.js';
import { ensurePrivateCluster, stopPrivateCluster } from './private-cluster.js';
import { waitUntilReady } from './readiness.js';
import { ensureSchemas } from './schema.js';
import { ensureTemporalServer } from './server-binary.js';
import { chooseServerPorts, writeServerConfig } from './server-config.js';
import { killServer, liveServerPid, readState, serverRoot, writeState, type PostgresTemporalState } from './state.js';
import { parsePostgresUrl, probeTcp, URL_ENV, type PostgresTarget } from './target.js';
import { purgeWhatWasCreated } from './teardown.js';
export { stopPostgresTemporal } from './teardown.js';

export interface PostgresTemporalOptions {
  /** Default: LLMGW_STATE_DIR or .llmgw. The private cluster and the server's files live under it. */
  stateDir?: string;
  /** Frontend gRPC port; 0 picks a free one. Default 7233. */
  port?: number;
  ip?: string;
  namespace?: string;
  /** Default: LLMGW_POSTGRES_URL if set, else llmgw's private cluster; null: the private cluster regardless. */
  postgresUrl?: string | null;
  /** Only on the databases' first use; Temporal cannot change it later. Default 4. */
  numHistoryShards?: number;
  /** Dynamic config values over llmgw's (see server-config.ts); the rest are the server's defaults. */
  dynamicConfig?: Record<string, unknown>;
  /** How long to wait for the server to accept workflows. Default 180 s. */
  readyTimeoutMs?: number;
  log?: Log;
}

export interface PostgresTemporal {
  address: string;
  namespace: string;
  pid: number;
  logFile: string;
  /** Where the databases are, for people (no password). */
  postgres: string;
  /** host:port of the PostgreSQL server. */
  postgresAddress: string;
  /** The server's Prometheus metrics. */
  metricsUrl: string;
  /** Resolves when the server process has exited. */
  exited: Promise<number | null>;
  /** Stops the server (and llmgw's PostgreSQL if this start started it); `purge` also deletes what llmgw created. */
  stop(options?: { purge?: boolean }): Promise<void>;
}

/** The PostgreSQL to use: LLMGW_POSTGRES_URL's, checked to answer, or llmgw's private cluster, started if it must be. */
async function openPostgres(
  rawUrl: string | undefined,
  stateDir: string,
  log: Log,
): Promise<{ target: PostgresTarget; startedPostgres: boolean }> {
  if (!rawUrl) {
    const cluster = await ensurePrivateCluster(stateDir, log);
    return { target: cluster.target, startedPostgres: cluster.startedHere };
  }
  const target = parsePostgresUrl(rawUrl);
  const problem = await probeTcp(target.host, target.port, 5_000);
  if (problem)
    throw new Error(
      `cannot reach PostgreSQL at ${target.host}:${target.port} from ${target.source}: ${problem}.\n` +
        `Start PostgreSQL there, fix ${URL_ENV}, or unset it to let llmgw run its own PostgreSQL under ${stateDir}/postgres.`,
    );
  return { target, startedPostgres: false };
}

/** This start's state: what an earlier start on the same databases recorded (shard count, databases created) carries over. */
function stateFor(
  previous: PostgresTemporalState | undefined,
  target: PostgresTarget,
  rawUrl: string | undefined,
  fresh: { address: string; namespace: string; numHistoryShards?: number },
): PostgresTemporalState {
  const server = `${target.host}:${target.port}`;
  const same =
    previous?.postgres.kind === 'private'
      ? !rawUrl
      : previous?.postgres.kind === 'url' && previous.postgres.server === server && previous.postgres.database === target.database;
  const numHistoryShards = (same && previous?.numHistoryShards) || fresh.numHistoryShards || 4;
  if (fresh.numHistoryShards && fresh.numHistoryShards !== numHistoryShards)
    throw new Error(
      `these databases were set up with ${numHistoryShards} history shards and Temporal cannot change that; purge them (\`llmgw temporal stop-postgres --purge\`) to choose again`,
    );
  const createdDatabases = same && previous?.postgres.kind === 'url' ? previous.postgres.createdDatabases : [];
  return {
    address: fresh.address,
    namespace: fresh.namespace,
    numHistoryShards,
    postgres: rawUrl ? { kind: 'url', server, database: target.database, createdDatabases } : { kind: 'private' },
  };
}

/** The frontend port this start may take; refuses when this state dir's server still runs, or the port is taken. */
async function frontendPort(
  stateDir: string,
  previous: PostgresTemporalState | undefined,
  ip: string,
  wanted: number | undefined,
): Promise<number> {
  const running = previous && liveServerPid(previous, serverRoot(stateDir));
  if (running) {
    const flag = stateDir === resolve(defaultStateDir()) ? '' : ` --state-dir ${stateDir}`;
    throw new Error(
      `a Temporal server on PostgreSQL from ${stateDir} already runs (pid ${running}, ${previous.address}): use it with TEMPORAL_ADDRESS=${previous.address}, or stop it with \`llmgw temporal stop-postgres${flag}\`.`,
    );
  }
  const port = wanted === 0 ? await findFreePort(ip) : (wanted ?? DEFAULT_PORTS.temporal);
  if (!(await isPortFree(port, ip)))
    throw new Error(
      `port ${port} on ${ip} is taken: is a Temporal server already running? Use it with TEMPORAL_ADDRESS=${ip}:${port}, or choose another --port.`,
    );
  return port;
}

/** The schemas in place, and the databases this start created recorded, so that a purge can remove them. */
async function ensureDatabases(
  stateDir: string,
  state: PostgresTemporalState,
  sqlTool: string,
  target: PostgresTarget,
  log: Log,
): Promise<void> {
  const created = await ensureSchemas(sqlTool, target, log);
  if (state.postgres.kind === 'url') state.postgres.createdDatabases = [...new Set([...state.postgres.createdDatabases, ...created])];
  writeState(stateDir, state);
}

/** PostgresTemporal.stop: the server, then llmgw's PostgreSQL if this start started it; `purge` then deletes what llmgw created. */
function stopper(
  stopServer: () => Promise<void>,
  stopOwnPostgres: () => Promise<void>,
  purge: () => Promise<void>,
): PostgresTemporal['stop'] {
  // Idempotent: Ctrl-C and the server's own exit may both ask for it.
  let stopped: Promise<void> | undefined;
  return async (options = {}) => {
    stopped ??= (async () => {
      await stopServer();
      await stopOwnPostgres();
    })();
    await stopped;
    if (options.purge) await purge();
  };
}

/** The server in its own process group, logging to `logFile`, so that it outlives the command that started it. */
function spawnServer(binary: string, root: string, env: string, logFile: string): { pid: number; exited: Promise<number | null> } {
  const logFd = openSync(logFile, 'a');
  try {
    const child = spawn(binary, ['--root', root, '--config', 'config', '--env', env, '--allow-no-auth', 'start'], {
      stdio: ['ignore', logFd, logFd],
      detached: true,
      env: withoutTemporalEnv(),
    });
    const exited = new Promise<number | null>((resolveExit) => {
      child.once('exit', (code) => resolveExit(code));
      child.once('error', () => resolveExit(null));
    });
    if (child.pid === undefined) throw new Error(`could not start ${binary}`);
    return { pid: child.pid, exited };
  } finally {
    closeSync(logFd);
  }
}

export async function startPostgresTemporal(options: PostgresTemporalOptions = {}): Promise<PostgresTemporal> {
  const log = options.log ?? ((line: string) => console.error(line));
  const stateDir = resolve(options.stateDir ?? defaultStateDir());
  const root = serverRoot(stateDir);
  const ip = options.ip ?? '127.0.0.1';
  if (ip === '0.0.0.0') throw new Error('give --ip the address other hosts reach this one at: Temporal announces it to its own services');
  const namespace = options.namespace ?? 'default';
  const previous = readState(stateDir);
  const port = await frontendPort(stateDir, previous, ip, options.port);
  mkdirSync(stateDir, { recursive: true });

  const binaries = await ensureTemporalServer(log);
  const temporalBin = await ensureTemporalCli(log);
  const rawUrl = (options.postgresUrl === undefined ? process.env[URL_ENV] : options.postgresUrl) || undefined;
  const { target, startedPostgres } = await openPostgres(rawUrl, stateDir, log);
  const stopOwnPostgres = async (): Promise<void> => {
    if (startedPostgres) await stopPrivateCluster(stateDir);
  };

  const logFile = join(root, 'server.log');
  let state: PostgresTemporalState;
  let pid: number;
  let exited: Promise<number | null>;
  let metricsUrl: string;
  try {
    state = stateFor(previous, target, rawUrl, { address: `${ip}:${port}`, namespace, numHistoryShards: options.numHistoryShards });
    await ensureDatabases(stateDir, state, binaries.sqlTool, target, log);
    const ports = await chooseServerPorts(ip, port);
    metricsUrl = `http://${ip}:${ports.metrics}/metrics`;
    const { env } = writeServerConfig({
      root,
      target,
      ip,
      ports,
      numHistoryShards: state.numHistoryShards,
      dynamicConfig: options.dynamicConfig,
    });
    ({ pid, exited } = spawnServer(binaries.server, root, env, logFile));
  } catch (error) {
    await stopOwnPostgres();
    throw error;
  }
  const serverPid = pid;
  state.serverPid = serverPid;
  writeState(stateDir, state);
  let hasExited = false;
  void exited.then(() => (hasExited = true));
  const stop = stopper(
    () => (hasExited ? Promise.resolve() : killServer(serverPid, exited)),
    stopOwnPostgres,
    () => purgeWhatWasCreated(stateDir, state, binaries.sqlTool, rawUrl),
  );

  try {
    await waitUntilReady({
      address: state.address,
      namespace,
      temporalBin,
      timeoutMs: options.readyTimeoutMs ?? 180_000,
      hasExited: () => hasExited,
      logFile,
    });
  } catch (error) {
    await stop();
    throw error;
  }
  log(`llmgw: Temporal ${state.address} (namespace ${namespace}) on ${target.source.replace(/^LLMGW_POSTGRES_URL=/, '')}`);
  return {
    address: state.address,
    namespace,
    pid: serverPid,
    logFile,
    postgres: target.source,
    postgresAddress: `${target.host}:${target.port}`,
    metricsUrl,
    exited,
    stop,
  };
}
