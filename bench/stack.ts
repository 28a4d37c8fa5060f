// The local stacks the benchmarks run against, all ended together: Temporal (an in-memory
// dev server, or the pinned server on PostgreSQL), control workers, and either simulated
// agents (one process each, with a router when asked: startStack) or a simulated fleet in
// one process (startFleetStack, bench/fleet-stack.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { startDevServer } from '../temporal/dev-server.js';
import { startPostgresTemporal } from '../temporal/postgres/server.js';
import { findFreePort } from '../common/ports.js';
import { llmgwDataConverter } from '../temporal/connection.js';
import { signalGroup } from '../agent/supervisor/processes/proc.js';
import { killMarkedEngines } from '../agent/supervisor/processes/markers.js';
import { ensureCatalogKeyFile, publicKeyFileOf } from '../common/catalog-key.js';

export const BIN = join(__dirname, '../../bin/llmgw.js');
export const BENCH_CATALOG = join(__dirname, '../../bench/catalog.yaml');
export const BENCH_DIR = resolve('.llmgw/bench');

export type TemporalKind = 'dev' | 'postgres';

export interface BenchTemporal {
  address: string;
  namespace: string;
  /** The server's Prometheus metrics (its `action` counter is what Temporal Cloud bills). */
  metricsUrl: string;
  /** For the report: which server, on what. */
  what: string;
  stop(): Promise<void>;
}

/** Everything any stack started, so that an interrupted start can still be undone. */
export const started = { groups: new Set<number>(), servers: new Set<BenchTemporal>() };

/** SIGKILL to every process group a stack started and a stop of its Temporal (for Ctrl-C before a stack is whole). */
export async function stopEverythingStarted(): Promise<void> {
  for (const pid of started.groups) signalGroup(pid, 'SIGKILL');
  started.groups.clear();
  await Promise.all([...started.servers].map((server) => server.stop().catch(() => undefined)));
  started.servers.clear();
}

/** Worker heartbeats and ListWorkers: agents' presence may be their workers' heartbeats. */
// frontend.namespaceCount: concurrent long polls per poller type per frontend. Each host's worker
// polls its own agent/<id> queue, so a fleet of hundreds exceeds the default (seen at 200
// hosts: 35,000 "namespace concurrent poller limit exceeded" in eight minutes, hosts unpolled).
const DYNAMIC_CONFIG = { 'frontend.WorkerHeartbeatsEnabled': true, 'frontend.ListWorkersEnabled': true, 'frontend.namespaceCount': 20000 };

export async function startTemporal(kind: TemporalKind): Promise<BenchTemporal> {
  const temporal = await startTemporalServer(kind);
  started.servers.add(temporal);
  return temporal;
}

async function startTemporalServer(kind: TemporalKind): Promise<BenchTemporal> {
  if (kind === 'postgres') {
    const server = await startPostgresTemporal({
      port: 0,
      stateDir: join(BENCH_DIR, 'postgres'),
      dynamicConfig: { ...DYNAMIC_CONFIG, 'frontend.namespaceRPS.visibility': 100 },
      log: (line) => console.error(line),
    });
    return {
      address: server.address,
      namespace: server.namespace,
      metricsUrl: server.metricsUrl,
      what: `Temporal 1.29.1 on PostgreSQL (${server.postgres})`,
      stop: () => server.stop({ purge: true }),
    };
  }
  const port = await findFreePort();
  const server = await startDevServer({
    port,
    headless: true,
    inMemory: true,
    logFile: join(BENCH_DIR, `temporal-${port}.log`),
    dynamicConfig: DYNAMIC_CONFIG,
  });
  return {
    address: server.address,
    namespace: 'default',
    metricsUrl: server.metricsUrl,
    what: 'dev server in memory',
    stop: () => server.stop(),
  };
}

/** The environment every llmgw process of a stack gets: Temporal, and one catalog key, as in production. */
export function stackEnv(temporal: BenchTemporal): Record<string, string> {
  const keyFile = join(mkdtempSync(join(tmpdir(), 'llmgw-bench-key-')), 'catalog.key');
  ensureCatalogKeyFile(keyFile);
  return {
    TEMPORAL_ADDRESS: temporal.address,
    TEMPORAL_NAMESPACE: temporal.namespace,
    LLMGW_CATALOG_KEY_FILE: keyFile,
    LLMGW_CATALOG_PUBLIC_KEY_FILE: publicKeyFileOf(keyFile),
    // The stack's agents enroll their own keys, as `llmgw up`'s do.
    LLMGW_AGENT_ENROLL_KEY_FILE: keyFile,
    LLMGW_METRICS_ADDR: 'off',
  };
}

/**
 * LLMGW_BENCH_CPU_PROF=DIR: every llmgw process of a stack profiles itself
 * (common/cpu-profile.ts) and writes what it sampled into DIR at each `markProfiles`.
 */
export function profileEnv(): Record<string, string> {
  const dir = process.env.LLMGW_BENCH_CPU_PROF;
  return dir ? { LLMGW_CPU_PROFILE_DIR: dir } : {};
}

/** Each process writes its CPU profile since the last mark (a no-op unless profiling). */
export function markProfiles(pids: number[]): void {
  if (!process.env.LLMGW_BENCH_CPU_PROF) return;
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGUSR2');
    } catch {
      // gone already
    }
  }
}

/** Starts one llmgw process (under `wrap`, e.g. `ip netns exec NS`) and resolves once it printed `ready`. */
export function spawnPart(
  children: ChildProcess[],
  args: string[],
  env: Record<string, string>,
  ready: RegExp,
  wrap: string[] = [],
): Promise<ChildProcess> {
  const argv = [...wrap, process.execPath, BIN, ...args];
  const child = spawn(argv[0]!, argv.slice(1), {
    env: { ...process.env, ...env, ...profileEnv() },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  children.push(child);
  if (child.pid) started.groups.add(child.pid);
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (chunk: Buffer): void => {
      // Only the tail is kept: a long-lived part must not fill the benchmark's memory.
      text = (text + chunk.toString()).slice(-4000);
      if (ready.test(text)) resolve(child);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`llmgw ${args[0]} exited (${code}): ${text.slice(-500)}`)));
  });
}

/**
 * Stops the processes a stack spawned: each group asked to stop, 3 s to do so, then the engines
 * its agents left behind and whatever still runs killed.
 */
export async function stopParts(children: ChildProcess[], nodeIds: string[]): Promise<void> {
  for (const child of children) if (child.pid) signalGroup(child.pid, 'SIGTERM');
  await new Promise((r) => setTimeout(r, 3_000));
  killMarkedEngines(nodeIds);
  for (const child of children) if (child.pid) signalGroup(child.pid, 'SIGKILL');
}

export function connectClient(temporal: BenchTemporal): Promise<{ client: Client; connection: Connection }> {
  return Connection.connect({ address: temporal.address }).then((connection) => ({
    connection,
    client: new Client({ connection, namespace: temporal.namespace, dataConverter: llmgwDataConverter() }),
  }));
}

export function startWorkers(
  children: ChildProcess[],
  count: number,
  env: Record<string, string>,
  catalog = BENCH_CATALOG,
): Promise<ChildProcess[]> {
  return Promise.all(
    Array.from({ length: count }, () => spawnPart(children, ['worker', '--catalog', catalog], env, /serving task queue llmgw/)),
  );
}

export interface Stack {
  env: Record<string, string>;
  client: Client;
  nodeIds: string[];
  routerUrl: string | undefined;
  /** The router's admin listener (/metrics, detailed /health). */
  routerAdminUrl: string | undefined;
  /** Runs one `llmgw` command against the stack and waits for it. */
  llmgw(args: string[]): Promise<number | null>;
  stop(): Promise<void>;
}

export interface StackOptions {
  hosts: number;
  router?: boolean;
  /** More `llmgw router` flags (bench:autoscale: the waiting line's limits). */
  routerArgs?: string[];
  /** The control worker's catalog (default bench/catalog.yaml). */
  catalog?: string;
  /** More variables for every process (bench:weights: the stand-in hub's HF_ENDPOINT). */
  env?: Record<string, string>;
  /** More `llmgw agent` flags for host i. */
  agentArgs?: (i: number) => string[];
}

export async function startStack(options: StackOptions): Promise<Stack> {
  const temporal = await startTemporal('dev');
  const env = { ...stackEnv(temporal), ...options.env };
  const children: ChildProcess[] = [];
  const nodeIds = Array.from({ length: options.hosts }, (_, i) => `bench-${i}`);
  try {
    return await startStackParts(options, temporal, env, children, nodeIds);
  } catch (error) {
    // A part that would not start (a catalog refused, a port taken): nothing is left running.
    await stopParts(children, nodeIds);
    await temporal.stop();
    throw error;
  }
}

async function startStackParts(
  options: StackOptions,
  temporal: BenchTemporal,
  env: Record<string, string>,
  children: ChildProcess[],
  nodeIds: string[],
): Promise<Stack> {
  await startWorkers(children, 1, env, options.catalog);
  await Promise.all(
    nodeIds.map((nodeId, i) => {
      const range = `${41000 + i * 100}-${41000 + i * 100 + 99}`;
      const stateDir = mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`));
      const args = ['agent', '--node-id', nodeId, '--gpus', 'builtin:h100x8', '--state-dir', stateDir, '--admin-addr', '127.0.0.1:0'];
      return spawnPart(children, [...args, '--port-range', range, ...(options.agentArgs?.(i) ?? [])], env, /registered with node\//);
    }),
  );
  let routerUrl: string | undefined;
  let routerAdminUrl: string | undefined;
  if (options.router) {
    const routerPort = await findFreePort();
    const admin = `127.0.0.1:${await findFreePort()}`;
    await spawnPart(
      children,
      ['router', '--port', String(routerPort), '--host', '127.0.0.1', '--admin-addr', admin, ...(options.routerArgs ?? [])],
      env,
      /listening on http/,
    );
    routerUrl = `http://127.0.0.1:${routerPort}`;
    routerAdminUrl = `http://${admin}`;
  }
  const { client, connection } = await connectClient(temporal);
  return {
    env,
    client,
    nodeIds,
    routerUrl,
    routerAdminUrl,
    async llmgw(args) {
      const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: 'ignore' });
      return new Promise((resolve) => child.once('exit', resolve));
    },
    async stop() {
      await connection.close();
      await stopParts(children, nodeIds);
      await temporal.stop();
    },
  };
}
