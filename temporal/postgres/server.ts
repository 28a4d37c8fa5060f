// Temporal on PostgreSQL in one call: the pinned server and SQL tool (built once), the
// databases (llmgw's private cluster or LLMGW_POSTGRES_URL), the schema, a one-node
// server config, the namespace and llmgw's search attributes, and a wait until the
// server accepts workflows. Used by `llmgw temporal start-postgres`, benchmarks and tests.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Client, Connection, isGrpcServiceError } from '@temporalio/client';
import { status as GrpcStatus } from '@grpc/grpc-js';
import { msToTs } from '@temporalio/common/lib/time';
import { ensureTemporalCli } from '../cli-binary.js';
import { defaultStateDir, frontendAnswers } from '../dev-server.js';
import { registerSearchAttributes } from '../search-attributes.js';
import { findFreePort, isPortFree } from '../../common/ports.js';
import { DEFAULT_PORTS } from '../../common/names.js';
import { SA } from '../../common/search-attributes.js';
import type { Log } from '../go-install.js';
import { ensureTemporalServer } from './server-binary.js';
import { ensurePrivateCluster, removePrivateCluster, stopPrivateCluster } from './private-cluster.js';
import { ensureSchemas, dropDatabases } from './schema.js';
import { writeServerConfig } from './server-config.js';
import { parsePostgresUrl, probeTcp, URL_ENV, type PostgresTarget } from './target.js';
import { killServer, liveServerPid, readState, serverRoot, writeState, type PostgresTemporalState } from './state.js';

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
  /** Resolves when the server process has exited. */
  exited: Promise<number | null>;
  /** Stops the server (and llmgw's PostgreSQL if this start started it); `purge` also deletes what llmgw created. */
  stop(options?: { purge?: boolean }): Promise<void>;
}

const SETUP_PROBE = { workflowId: 'llmgw-setup-probe', taskQueue: 'llmgw-setup-probe', type: 'llmgwSetupProbe' } as const;

/** The environment for the server and the CLI calls on it: the user's TEMPORAL_* settings are for their cluster, not this one. */
function localEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('TEMPORAL_')));
}

export async function startPostgresTemporal(options: PostgresTemporalOptions = {}): Promise<PostgresTemporal> {
  const log = options.log ?? ((line: string) => console.error(line));
  const stateDir = resolve(options.stateDir ?? defaultStateDir());
  const root = serverRoot(stateDir);
  const ip = options.ip ?? '127.0.0.1';
  const namespace = options.namespace ?? 'default';
  const previous = readState(stateDir);
  const running = previous && liveServerPid(previous, root);
  if (running)
    throw new Error(
      `a Temporal server on PostgreSQL from ${stateDir} already runs (pid ${running}, ${previous.address}): use it with TEMPORAL_ADDRESS=${previous.address}, or stop it with \`llmgw temporal stop-postgres${stateDir === resolve(defaultStateDir()) ? '' : ` --state-dir ${stateDir}`}\`.`,
    );
  const port = options.port === 0 ? await findFreePort(ip) : (options.port ?? DEFAULT_PORTS.temporal);
  if (!(await isPortFree(port, ip)))
    throw new Error(
      `port ${port} on ${ip} is taken: is a Temporal server already running? Use it with TEMPORAL_ADDRESS=${ip}:${port}, or choose another --port.`,
    );
  mkdirSync(stateDir, { recursive: true });

  const [binaries, temporalBin] = [await ensureTemporalServer(log), await ensureTemporalCli(log)];
  const rawUrl = (options.postgresUrl === undefined ? process.env[URL_ENV] : options.postgresUrl) || undefined;
  let target: PostgresTarget;
  let startedPostgres = false;
  if (rawUrl) {
    target = parsePostgresUrl(rawUrl);
    const problem = await probeTcp(target.host, target.port, 5_000);
    if (problem)
      throw new Error(
        `cannot reach PostgreSQL at ${target.host}:${target.port} from ${target.source}: ${problem}.\n` +
          `Start PostgreSQL there, fix ${URL_ENV}, or unset it to let llmgw run its own PostgreSQL under ${stateDir}/postgres.`,
      );
  } else {
    const cluster = await ensurePrivateCluster(stateDir, log);
    target = cluster.target;
    startedPostgres = cluster.startedHere;
  }
  const stopOwnPostgres = async (): Promise<void> => {
    if (startedPostgres) await stopPrivateCluster(stateDir);
  };

  let child: ChildProcess;
  const logFile = join(root, 'server.log');
  // What an earlier start on these same databases recorded: their shard count and what llmgw created there.
  const earlier =
    previous &&
    (previous.postgres.kind === 'private'
      ? !rawUrl
      : rawUrl !== undefined &&
        previous.postgres.server === `${target.host}:${target.port}` &&
        previous.postgres.database === target.database)
      ? previous
      : undefined;
  const numHistoryShards = earlier?.numHistoryShards ?? options.numHistoryShards ?? 4;
  const state: PostgresTemporalState = {
    address: `${ip === '0.0.0.0' ? '127.0.0.1' : ip}:${port}`,
    namespace,
    numHistoryShards,
    postgres: rawUrl
      ? {
          kind: 'url',
          server: `${target.host}:${target.port}`,
          database: target.database,
          createdDatabases: earlier?.postgres.kind === 'url' ? earlier.postgres.createdDatabases : [],
        }
      : { kind: 'private' },
  };
  try {
    if (options.numHistoryShards && options.numHistoryShards !== numHistoryShards)
      throw new Error(
        `these databases were set up with ${numHistoryShards} history shards and Temporal cannot change that; purge them (\`llmgw temporal stop-postgres --purge\`) to choose again`,
      );
    const created = await ensureSchemas(binaries.sqlTool, target, log);
    if (state.postgres.kind === 'url') state.postgres.createdDatabases = [...new Set([...state.postgres.createdDatabases, ...created])];
    writeState(stateDir, state);

    // Membership ports go into a smallint column of the cluster's membership table, so they
    // must lie below 32768, where the kernel's ephemeral ports (free-port picks) do not.
    const membership = await freePortsBelow32768(ip, 4);
    const ports = {
      frontend: port,
      frontendHttp: await findFreePort(ip),
      frontendMembership: membership[0]!,
      history: await findFreePort(ip),
      historyMembership: membership[1]!,
      matching: await findFreePort(ip),
      matchingMembership: membership[2]!,
      worker: await findFreePort(ip),
      workerMembership: membership[3]!,
    };
    const { env } = writeServerConfig({ root, target, ip, ports, numHistoryShards: state.numHistoryShards });
    const logFd = openSync(logFile, 'a');
    try {
      child = spawn(binaries.server, ['--root', root, '--config', 'config', '--env', env, '--allow-no-auth', 'start'], {
        stdio: ['ignore', logFd, logFd],
        detached: true,
        env: localEnv(),
      });
    } finally {
      closeSync(logFd);
    }
  } catch (error) {
    await stopOwnPostgres();
    throw error;
  }
  const pid = child.pid;
  if (pid === undefined) throw new Error(`could not start ${binaries.server}`);
  state.serverPid = pid;
  writeState(stateDir, state);
  const exited = new Promise<number | null>((resolveExit) => child.once('exit', (code) => resolveExit(code)));
  let hasExited = false;
  void exited.then(() => (hasExited = true));

  // Idempotent: Ctrl-C and the server's own exit may both ask for it.
  let stopped: Promise<void> | undefined;
  const stop = async ({ purge = false }: { purge?: boolean } = {}): Promise<void> => {
    stopped ??= (async () => {
      if (!hasExited) await killServer(pid, exited);
      await stopOwnPostgres();
    })();
    await stopped;
    if (purge) await purgeWhatWasCreated(stateDir, state, binaries.sqlTool, rawUrl);
  };

  try {
    await waitUntilReady(state, temporalBin, options.readyTimeoutMs ?? 180_000, () => hasExited, logFile);
  } catch (error) {
    await stop();
    throw error;
  }
  log(`llmgw: Temporal ${state.address} (namespace ${namespace}) on ${target.source.replace(/^LLMGW_POSTGRES_URL=/, '')}`);
  return {
    address: state.address,
    namespace,
    pid,
    logFile,
    postgres: target.source,
    postgresAddress: `${target.host}:${target.port}`,
    exited,
    stop,
  };
}

/** Frontend answers → namespace exists → search attributes registered → a workflow carrying them starts. */
async function waitUntilReady(
  state: PostgresTemporalState,
  temporalBin: string,
  timeoutMs: number,
  hasExited: () => boolean,
  logFile: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastProblem = 'the frontend did not answer';
  const giveUp = (): Error =>
    new Error(
      `the Temporal server on PostgreSQL was not ready within ${Math.round(timeoutMs / 1000)} s (${lastProblem}); its log (${logFile}) ends:\n${tail(logFile)}`,
    );
  const step = async (what: string, attempt: () => Promise<boolean>): Promise<void> => {
    for (;;) {
      if (hasExited()) throw new Error(`the Temporal server exited while ${what}; its log (${logFile}) ends:\n${tail(logFile)}`);
      try {
        if (await attempt()) return;
      } catch (error) {
        // A search attribute of the wrong type does not fix itself by waiting.
        if (error instanceof Error && /exists with type/.test(error.message)) throw error;
        lastProblem = `${what}: ${error instanceof Error ? error.message : String(error)}`;
      }
      if (Date.now() > deadline) throw giveUp();
      await new Promise((r) => setTimeout(r, 500));
    }
  };

  await step('waiting for the frontend', () => frontendAnswers(state.address));
  const connection = await Connection.connect({ address: state.address, connectTimeout: 5_000 });
  try {
    const service = connection.workflowService;
    await step(`creating namespace ${state.namespace}`, async () => {
      try {
        await service.describeNamespace({ namespace: state.namespace });
        return true;
      } catch (error) {
        if (!isGrpcServiceError(error) || error.code !== GrpcStatus.NOT_FOUND) throw error;
      }
      await service
        .registerNamespace({ namespace: state.namespace, workflowExecutionRetentionPeriod: msToTs('3 days') })
        .catch((error: unknown) => {
          if (!isGrpcServiceError(error) || error.code !== GrpcStatus.ALREADY_EXISTS) throw error;
        });
      return false;
    });
    await step('registering the search attributes', async () => {
      await registerSearchAttributes(temporalBin, ['--address', state.address, '--namespace', state.namespace], localEnv());
      return true;
    });
    // Every service caches namespaces (the SQL search attributes are namespace aliases) and
    // refreshes them every few seconds: a workflow that carries all six attributes is the
    // proof that the services which must accept them do.
    const client = new Client({ connection, namespace: state.namespace });
    await step('starting a workflow with the search attributes', async () => {
      const handle = await client.workflow.start(SETUP_PROBE.type, {
        taskQueue: SETUP_PROBE.taskQueue,
        workflowId: SETUP_PROBE.workflowId,
        workflowIdConflictPolicy: 'TERMINATE_EXISTING',
        typedSearchAttributes: [
          { key: SA.deployment, value: 'llmgw-setup-probe' },
          { key: SA.model, value: 'llmgw-setup-probe' },
          { key: SA.state, value: 'Stopped' },
          { key: SA.nodes, value: [] },
          { key: SA.gpuClass, value: 'none' },
          { key: SA.freeGpus, value: 0 },
        ],
      });
      await handle.terminate('llmgw: setup probe, the server accepts workflows with llmgw search attributes');
      // Deleted, so that it never shows among the user's workflows (the deletion is asynchronous).
      await service.deleteWorkflowExecution({ namespace: state.namespace, workflowExecution: { workflowId: handle.workflowId } });
      return true;
    });
  } finally {
    await connection.close();
  }
}

async function purgeWhatWasCreated(
  stateDir: string,
  state: PostgresTemporalState,
  sqlTool: string,
  rawUrl: string | undefined,
): Promise<void> {
  if (state.postgres.kind === 'private') {
    await stopPrivateCluster(stateDir);
    removePrivateCluster(stateDir);
  } else if (state.postgres.createdDatabases.length) {
    if (!rawUrl)
      throw new Error(`set ${URL_ENV} to the PostgreSQL at ${state.postgres.server} to drop ${state.postgres.createdDatabases.join(', ')}`);
    const target = parsePostgresUrl(rawUrl);
    if (`${target.host}:${target.port}` !== state.postgres.server)
      throw new Error(
        `${URL_ENV} names ${target.host}:${target.port}, but llmgw created its databases on ${state.postgres.server}; not dropping anything`,
      );
    await dropDatabases(sqlTool, target, state.postgres.createdDatabases);
  }
  rmSync(serverRoot(stateDir), { recursive: true, force: true });
}

/** `llmgw temporal stop-postgres`: stops what a start left running, found through its state file. */
export async function stopPostgresTemporal(options: { stateDir?: string; purge?: boolean; log?: Log } = {}): Promise<void> {
  const log = options.log ?? ((line: string) => console.log(line));
  const stateDir = resolve(options.stateDir ?? defaultStateDir());
  const state = readState(stateDir);
  const pid = state && liveServerPid(state, serverRoot(stateDir));
  if (pid) {
    await killServer(pid);
    log(`stopped the Temporal server (pid ${pid})`);
  }
  if (await stopPrivateCluster(stateDir)) log(`stopped llmgw's PostgreSQL (${stateDir}/postgres)`);
  if (options.purge) {
    const purgeState: PostgresTemporalState = state ?? { address: '', namespace: '', numHistoryShards: 0, postgres: { kind: 'private' } };
    const sqlTool = purgeState.postgres.kind === 'url' ? (await ensureTemporalServer()).sqlTool : '';
    await purgeWhatWasCreated(stateDir, purgeState, sqlTool, process.env[URL_ENV]);
    log(
      purgeState.postgres.kind === 'private'
        ? `removed ${stateDir}/postgres and ${serverRoot(stateDir)}`
        : `dropped ${purgeState.postgres.createdDatabases.join(', ') || 'nothing (llmgw created no database there)'}; removed ${serverRoot(stateDir)}`,
    );
  }
}

/** Free ports in 20000-32767 (above the engines' and Ray's default ranges), from a random start so concurrent starts rarely collide. */
async function freePortsBelow32768(ip: string, count: number): Promise<number[]> {
  const [low, high] = [20_000, 32_767];
  const found: number[] = [];
  let candidate = low + Math.floor(Math.random() * (high - low));
  for (let tried = 0; found.length < count && tried <= high - low; tried++, candidate = candidate >= high ? low : candidate + 1)
    if (await isPortFree(candidate, ip)) found.push(candidate);
  if (found.length < count) throw new Error(`found no ${count} free ports between ${low} and ${high} on ${ip}`);
  return found;
}

/** The end of the server's log, its JSON lines cut to level, message and error (the stack traces would bury them). */
function tail(file: string, lines = 12): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return '(no log)';
  }
  return text
    .trimEnd()
    .split('\n')
    .slice(-lines)
    .map((line) => {
      try {
        const entry = JSON.parse(line) as { level?: string; msg?: string; error?: string };
        return `${entry.level ?? ''}: ${entry.msg ?? ''}${entry.error ? `: ${entry.error}` : ''}`;
      } catch {
        return line.slice(0, 500);
      }
    })
    .join('\n');
}
