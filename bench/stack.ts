// The local stack the benchmarks run against: an in-memory dev server, the control worker,
// simulated agents (one process each) and, when asked, a router; all ended together.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { startDevServer, type DevServer } from '../temporal/dev-server.js';
import { findFreePort } from '../common/ports.js';
import { llmgwDataConverter } from '../temporal/connection.js';
import { signalGroup } from '../agent/supervisor/proc.js';
import { killMarkedEngines } from '../agent/supervisor/markers.js';
import { ensureCatalogKeyFile } from '../common/catalog-key.js';

export const BIN = join(__dirname, '../../bin/llmgw.js');
export const BENCH_CATALOG = join(__dirname, '../../bench/catalog.yaml');

export interface Stack {
  server: DevServer;
  env: Record<string, string>;
  client: Client;
  nodeIds: string[];
  routerUrl: string | undefined;
  /** Runs one `llmgw` command against the stack and waits for it. */
  llmgw(args: string[]): Promise<number | null>;
  stop(): Promise<void>;
}

/** Starts one llmgw process and resolves once it printed `ready`. */
function spawnPart(children: ChildProcess[], args: string[], env: Record<string, string>, ready: RegExp): Promise<void> {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (chunk: Buffer): void => {
      text += chunk.toString();
      if (ready.test(text)) resolve();
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`llmgw ${args[0]} exited (${code}): ${text.slice(-500)}`)));
  });
}

export interface StackOptions {
  hosts: number;
  router?: boolean;
  /** More `llmgw router` flags (bench:autoscale: the waiting line's limits). */
  routerArgs?: string[];
}

export async function startStack(options: StackOptions): Promise<Stack> {
  const port = await findFreePort();
  const server = await startDevServer({ port, headless: true, inMemory: true, logFile: `.llmgw/bench/temporal-${port}.log` });
  // The worker signs revisions with this key and the agents verify them, as in production.
  const keyFile = join(mkdtempSync(join(tmpdir(), 'llmgw-bench-key-')), 'catalog.key');
  ensureCatalogKeyFile(keyFile);
  const env = { TEMPORAL_ADDRESS: server.address, LLMGW_CATALOG_KEY_FILE: keyFile, LLMGW_METRICS_ADDR: 'off' };
  const children: ChildProcess[] = [];
  const nodeIds = Array.from({ length: options.hosts }, (_, i) => `bench-${i}`);
  await spawnPart(children, ['worker', '--catalog', BENCH_CATALOG], env, /serving task queue llmgw/);
  await Promise.all(
    nodeIds.map((nodeId, i) =>
      spawnPart(
        children,
        [
          'agent',
          '--node-id',
          nodeId,
          '--gpus',
          'builtin:h100x8',
          '--state-dir',
          mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`)),
          '--admin-addr',
          '127.0.0.1:0',
          '--port-range',
          `${41000 + i * 100}-${41000 + i * 100 + 99}`,
        ],
        env,
        /registered with node\//,
      ),
    ),
  );
  let routerUrl: string | undefined;
  if (options.router) {
    const routerPort = await findFreePort();
    await spawnPart(
      children,
      ['router', '--port', String(routerPort), '--host', '127.0.0.1', ...(options.routerArgs ?? [])],
      env,
      /listening on http/,
    );
    routerUrl = `http://127.0.0.1:${routerPort}`;
  }
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection, dataConverter: llmgwDataConverter() });
  return {
    server,
    env,
    client,
    nodeIds,
    routerUrl,
    async llmgw(args) {
      const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: 'ignore' });
      return new Promise((resolve) => child.once('exit', resolve));
    },
    async stop() {
      await connection.close();
      for (const child of children) if (child.pid) signalGroup(child.pid, 'SIGTERM');
      await new Promise((r) => setTimeout(r, 3_000));
      killMarkedEngines(nodeIds);
      for (const child of children) if (child.pid) signalGroup(child.pid, 'SIGKILL');
      await server.stop();
    },
  };
}
