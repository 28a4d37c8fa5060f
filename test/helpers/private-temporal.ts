// A Temporal dev server that one e2e file owns, for files that stop or kill it (restarted
// from its data file, on the same port): clients, the deployment status query and the
// environment that points llmgw processes at it.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { startDevServer, type DevServer } from '../../temporal/dev-server.js';
import { findFreePort } from '../../common/ports.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';

export interface PrivateTemporal {
  port: number;
  /** The server process now running (for a test that kills it). */
  readonly server: DevServer;
  /** TEMPORAL_ADDRESS for llmgw processes and CLI runs against this server. */
  env: Record<string, string>;
  /** Stops the server (its data file stays). */
  stop(): Promise<void>;
  /** Starts it again from its data file, on the same port. */
  restart(): Promise<void>;
  /** Temporal loses everything: stopped, and started on the same port with an empty data file. */
  wipe(): Promise<void>;
  /** A client for the length of `body`; `connectTimeoutMs` for callers that poll through outages. */
  withClient<T>(body: (client: Client) => Promise<T>, connectTimeoutMs?: number): Promise<T>;
  /** A deployment's status, as its workflow answers it. */
  status(name: string, connectTimeoutMs?: number): Promise<DeploymentView>;
}

/** `label` names the data folder and the log file (`.llmgw/test/temporal-<label>-<port>.log`). */
export async function startPrivateTemporal(label: string, dataLabel = label): Promise<PrivateTemporal> {
  const port = await findFreePort();
  const freshDbFile = (): string => join(mkdtempSync(join(tmpdir(), `llmgw-${dataLabel}-`)), 'dev.db');
  let dbFile = freshDbFile();
  const start = (): Promise<DevServer> =>
    startDevServer({
      temporalBin: inject('temporalBin'),
      port,
      headless: true,
      dbFile,
      logFile: `.llmgw/test/temporal-${label}-${port}.log`,
    });
  let server: DevServer | undefined = await start();
  const temporal: PrivateTemporal = {
    port,
    get server() {
      if (!server) throw new Error('the private dev server is stopped');
      return server;
    },
    env: { TEMPORAL_ADDRESS: `127.0.0.1:${port}` },
    async stop() {
      await server?.stop();
      server = undefined;
    },
    async restart() {
      server = await start();
    },
    async wipe() {
      await temporal.stop();
      dbFile = freshDbFile();
      server = await start();
    },
    async withClient(body, connectTimeoutMs) {
      const connection = await Connection.connect({
        address: `127.0.0.1:${port}`,
        ...(connectTimeoutMs ? { connectTimeout: connectTimeoutMs } : {}),
      });
      try {
        return await body(new Client({ connection, dataConverter: llmgwDataConverter() }));
      } finally {
        await connection.close();
      }
    },
    status(name, connectTimeoutMs) {
      return temporal.withClient(
        (client) => client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery),
        connectTimeoutMs,
      );
    },
  };
  return temporal;
}
