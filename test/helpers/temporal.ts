// Test helpers for talking to the harness's Temporal dev server and running workers.
import { inject } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { startDevServer, type DevServer } from '../../temporal/dev-server.js';
import { findFreePort } from '../../common/ports.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Set by useOwnTemporal: this test file's own server instead of the shared one. */
let ownServer: DevServer | undefined;

/**
 * Gives the calling test file a Temporal server of its own for every helper (workers, agents,
 * the CLI, clients). For files that kill control workers or count what one worker did: on the
 * shared server, other files' workers poll the same task queue and run their workflows too.
 */
export async function useOwnTemporal(
  label: string,
  options: { webUi?: boolean } = {},
): Promise<{ stop(): Promise<void>; webUiUrl?: string }> {
  // The dev server picks its internal services' ports itself: with test files starting servers
  // in parallel, another process can take one between its pick and its bind. Such a start is
  // tried again on other ports (three tries); any other failure is thrown at once.
  for (let attempt = 1; ; attempt++) {
    const port = await findFreePort();
    try {
      ownServer = await startDevServer({
        temporalBin: inject('temporalBin'),
        port,
        // The Web UI on a free port, for a test that looks at what it shows.
        ...(options.webUi ? { uiPort: await findFreePort() } : { headless: true }),
        dbFile: join(mkdtempSync(join(tmpdir(), `llmgw-${label}-`)), 'dev.db'),
        logFile: `.llmgw/test/temporal-${label}-${port}.log`,
      });
      break;
    } catch (error) {
      if (attempt >= 3 || !/address already in use/.test(String(error))) throw error;
    }
  }
  const server = ownServer;
  return { stop: () => server.stop(), ...(server.uiUrl ? { webUiUrl: server.uiUrl } : {}) };
}

export function temporalAddress(): string {
  if (ownServer) return ownServer.address;
  const address = inject('temporalAddress');
  if (!address) throw new Error('this test needs the Temporal dev server: run it without LLMGW_SKIP_TEMPORAL=1');
  return address;
}

export async function testClient(): Promise<{ client: Client; close(): Promise<void> }> {
  const connection = await Connection.connect({ address: temporalAddress() });
  const client = new Client({ connection, dataConverter: llmgwDataConverter() });
  return { client, close: () => connection.close() };
}

/** Runs a worker for the duration of `body`, then shuts it down. */
export async function withWorker<T>(options: Omit<WorkerOptions, 'connection' | 'dataConverter'>, body: () => Promise<T>): Promise<T> {
  const connection = await NativeConnection.connect({ address: temporalAddress() });
  const worker = await Worker.create({ ...options, connection, dataConverter: llmgwDataConverter() });
  try {
    return await worker.runUntil(body());
  } finally {
    await connection.close();
  }
}

export function uniqueId(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 7)}`;
}
