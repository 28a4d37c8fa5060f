// Temporal on PostgreSQL, as `llmgw temporal start-postgres` runs it: from a clean state
// folder in one call (private PostgreSQL cluster, schema, server, namespace, search
// attributes), a real workflow through it on a Worker Deployment, a restart that keeps
// what it stored, a teardown that leaves nothing behind, and errors that say what to do.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { StartShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { SEARCH_ATTRIBUTES } from '../../common/names.js';
import { isPortFree, findFreePort } from '../../common/ports.js';
import { SA } from '../../common/search-attributes.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { ensureTemporalCli } from '../../temporal/cli-binary.js';
import { onPath } from '../../temporal/go-install.js';
import { listSearchAttributes } from '../../temporal/search-attributes.js';
import { findPostgresBinDir, POSTGRES_BIN_ENV } from '../../temporal/postgres/private-cluster.js';
import { ensureTemporalServer, temporalServerCacheDir } from '../../temporal/postgres/server-binary.js';
import { startPostgresTemporal, type PostgresTemporal } from '../../temporal/postgres/server.js';
import { shardRoundTrip } from '../workflows/roundtrip.js';
import * as activities from '../helpers/roundtrip-activities.js';
import { uniqueId } from '../helpers/temporal.js';

const execFileAsync = promisify(execFile);

/** Why this machine cannot run the test, or undefined. */
async function missing(): Promise<string | undefined> {
  if (!existsSync(join(temporalServerCacheDir(), 'temporal-server')) && !(await onPath('go')))
    return 'needs Go (to build the Temporal server 1.29.1) or the server already in the cache';
  try {
    findPostgresBinDir();
  } catch {
    return 'needs PostgreSQL server programs (initdb, pg_ctl): apt-get install postgresql, or set LLMGW_POSTGRES_BIN_DIR';
  }
  return undefined;
}

// Under the checkout rather than /tmp: as root, PostgreSQL runs as the postgres user, which
// must be able to reach its data folder, and a private temporary folder is closed to it.
const stateRoot = resolve('.llmgw/test');
const servers: PostgresTemporal[] = [];
let skipReason: string | undefined;
let temporalBin = '';

async function temporal(args: string[], address: string): Promise<string> {
  const { stdout } = await execFileAsync(temporalBin, [...args, '--address', address, '--namespace', 'default'], { timeout: 30_000 });
  return stdout;
}

async function eventually<T>(what: string, attempt: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await attempt().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

describe('Temporal on PostgreSQL', () => {
  beforeAll(async () => {
    skipReason = await missing();
    if (skipReason) return console.warn(`skipping Temporal on PostgreSQL: it ${skipReason}`);
    mkdirSync(stateRoot, { recursive: true });
    // A build, on a machine that has never run it, takes minutes; later runs find the cache.
    await ensureTemporalServer((line) => console.log(line));
    temporalBin = await ensureTemporalCli((line) => console.log(line));
  }, 30 * 60_000);

  afterAll(async () => {
    for (const server of servers) await server.stop().catch(() => undefined);
  });

  it('starts from nothing in one call, runs a workflow on a Worker Deployment, keeps it across a restart and purges cleanly', async (context) => {
    if (skipReason) context.skip(skipReason);
    const stateDir = join(stateRoot, uniqueId('pg'));
    const started = Date.now();
    const first = await startPostgresTemporal({ stateDir, port: 0, postgresUrl: null, log: (line) => console.log(line) });
    servers.push(first);
    console.log(`Temporal on a fresh PostgreSQL ready in ${Date.now() - started} ms at ${first.address}`);

    // llmgw's six search attributes, with their types, as the workflows write them.
    const attributes = await listSearchAttributes(temporalBin, ['--address', first.address, '--namespace', 'default']);
    for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) expect(attributes[name], name).toBe(type);

    // A versioned worker registers its Worker Deployment; making its version current routes work to it.
    const deploymentName = uniqueId('llmgw-pg');
    const taskQueue = uniqueId('pg-roundtrip');
    const workflowId = uniqueId('pg-roundtrip');
    const workerConnection = await NativeConnection.connect({ address: first.address });
    const worker = await Worker.create({
      connection: workerConnection,
      taskQueue,
      workflowsPath: join(__dirname, '../workflows/roundtrip.ts'),
      activities,
      dataConverter: llmgwDataConverter(),
      workerDeploymentOptions: {
        useWorkerVersioning: true,
        version: { deploymentName, buildId: 'build-1' },
        defaultVersioningBehavior: 'AUTO_UPGRADE',
      },
    });
    const connection = await Connection.connect({ address: first.address });
    const client = new Client({ connection, dataConverter: llmgwDataConverter() });
    try {
      const spec = create(StartShardSchema, {
        replicaId: 'replica/pg/1',
        shardId: 'replica/pg/1/rank-0',
        nodeId: 'pg-node',
        gpuIndices: [0, 1],
      });
      const result = await worker.runUntil(async () => {
        await eventually('the Worker Deployment to be listed', async () =>
          (await temporal(['worker', 'deployment', 'list'], first.address)).includes(deploymentName) ? true : undefined,
        );
        await temporal(
          ['worker', 'deployment', 'set-current-version', '--deployment-name', deploymentName, '--build-id', 'build-1', '--yes'],
          first.address,
        );
        const described = await temporal(['worker', 'deployment', 'describe', '--name', deploymentName], first.address);
        expect(described).toContain('build-1');
        return await client.workflow.execute(shardRoundTrip, {
          taskQueue,
          workflowId,
          args: [spec],
          typedSearchAttributes: [
            { key: SA.deployment, value: 'pg-test' },
            { key: SA.nodes, value: ['pg-node'] },
            { key: SA.freeGpus, value: 6 },
          ],
        });
      });
      expect(result.spec?.shardId).toBe('replica/pg/1/rank-0');
      expect(result.status?.gpuIndices).toEqual([0, 1]);

      // Visibility on PostgreSQL answers queries on llmgw's attributes (it is written asynchronously).
      await eventually('the workflow in visibility', async () => {
        for await (const execution of client.workflow.list({ query: `LlmgwDeployment = "pg-test" AND LlmgwNodes = "pg-node"` }))
          if (execution.workflowId === workflowId) return true;
        return undefined;
      });
      expect(await temporal(['workflow', 'list'], first.address)).toContain(workflowId);
    } finally {
      await connection.close();
      await workerConnection.close();
    }

    // A wrong password on the same PostgreSQL is an error that names the cause and the fix, and never shows the password.
    const wrong = `postgres://temporal:not-the-password@${first.postgresAddress}/temporal`;
    const wrongStateDir = join(stateRoot, uniqueId('pg-wrong'));
    const refused = startPostgresTemporal({ stateDir: wrongStateDir, port: 0, postgresUrl: wrong, log: () => undefined });
    await expect(refused).rejects.toThrow(/password authentication failed[\s\S]*Fix the user and password in LLMGW_POSTGRES_URL/);
    await expect(refused).rejects.not.toThrow(/not-the-password/);
    rmSync(wrongStateDir, { recursive: true, force: true });

    // Stopped and started again on the same folder: the same databases, so the workflow is still there.
    await first.stop();
    expect(await isPortFree(Number(first.address.split(':')[1]))).toBe(true);
    const second = await startPostgresTemporal({ stateDir, port: 0, postgresUrl: null, log: (line) => console.log(line) });
    servers.push(second);
    const again = await Connection.connect({ address: second.address });
    try {
      const description = await new Client({ connection: again }).workflow.getHandle(workflowId).describe();
      expect(description.status.name).toBe('COMPLETED');
    } finally {
      await again.close();
    }

    // Teardown with purge: no server, no PostgreSQL, no files.
    await second.stop({ purge: true });
    expect(await isPortFree(Number(second.address.split(':')[1]))).toBe(true);
    expect(await isPortFree(Number(second.postgresAddress.split(':')[1]))).toBe(true);
    expect(readdirSync(stateDir)).toEqual([]);
    rmSync(stateDir, { recursive: true, force: true });
  }, 600_000);

  it('says what to do, without waiting long, when PostgreSQL cannot be reached or started', async (context) => {
    if (skipReason) context.skip(skipReason);
    const stateDir = join(stateRoot, uniqueId('pg-broken'));
    const quiet = { stateDir, port: 0, log: () => undefined };

    const closedPort = await findFreePort();
    const unreachable = startPostgresTemporal({ ...quiet, postgresUrl: `postgres://temporal:secret@127.0.0.1:${closedPort}/temporal` });
    await expect(unreachable).rejects.toThrow(
      new RegExp(
        `cannot reach PostgreSQL at 127\\.0\\.0\\.1:${closedPort}[\\s\\S]*ECONNREFUSED[\\s\\S]*Start PostgreSQL there, fix LLMGW_POSTGRES_URL, or unset it`,
      ),
    );
    await expect(unreachable).rejects.not.toThrow(/secret/);

    await expect(startPostgresTemporal({ ...quiet, postgresUrl: 'mysql://temporal@db:3306/temporal' })).rejects.toThrow(
      /the scheme must be postgres:\/\/ or postgresql:\/\//,
    );
    await expect(startPostgresTemporal({ ...quiet, postgresUrl: 'postgres://:pw@db/temporal' })).rejects.toThrow(/a user is needed/);

    // No PostgreSQL programs to start a cluster with.
    const empty = mkdtempSync(join(stateRoot, 'no-postgres-'));
    process.env[POSTGRES_BIN_ENV] = empty;
    try {
      await expect(startPostgresTemporal({ ...quiet, postgresUrl: null })).rejects.toThrow(
        /holds no initdb and pg_ctl[\s\S]*apt-get install postgresql[\s\S]*LLMGW_POSTGRES_URL=postgres:\/\//,
      );
    } finally {
      delete process.env[POSTGRES_BIN_ENV];
      rmSync(empty, { recursive: true, force: true });
      rmSync(stateDir, { recursive: true, force: true });
    }
  }, 120_000);
});
