// npm run bench:deploy — how long the control plane takes from a deployModel start to
// every replica Ready, with the fake engine's load time at 0: for 1 replica on 1 host
// and 32 replicas over 8 simulated hosts. Prints the median of each phase (placement,
// start, healthy) and the Temporal history events per replica. Figures, not asserts.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { startDevServer } from '../temporal/dev-server.js';
import { findFreePort } from '../common/ports.js';
import { llmgwDataConverter } from '../temporal/connection.js';
import { deploymentStatusQuery } from '../workflows/definitions.js';
import { signalGroup } from '../agent/supervisor/proc.js';
import { killMarkedEngines } from '../agent/supervisor/markers.js';
import { ensureCatalogKeyFile } from '../common/catalog-key.js';

const BIN = join(__dirname, '../../bin/llmgw.js');
const CATALOG = join(__dirname, '../../bench/catalog.yaml');
const children: ChildProcess[] = [];

function spawnPart(args: string[], env: Record<string, string>): Promise<void> {
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
      if (/serving task queue llmgw|registered with node\//.test(text)) resolve();
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`llmgw ${args[0]} exited (${code}): ${text.slice(-500)}`)));
  });
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.floor(sorted.length / 2)]! : NaN;
}

async function phases(client: Client, replicaId: string): Promise<{ placement: number; start: number; healthy: number; events: number }> {
  const history = await client.workflow.getHandle(replicaId).fetchHistory();
  const events = history.events ?? [];
  const time = (event: (typeof events)[number]): number =>
    Number(event.eventTime?.seconds ?? 0) * 1000 + Math.round((event.eventTime?.nanos ?? 0) / 1e6);
  const span = (activity: string): number => {
    const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === activity);
    if (!scheduled) return NaN;
    const completed = events.find(
      (e) =>
        e.activityTaskCompletedEventAttributes &&
        Number(e.activityTaskCompletedEventAttributes.scheduledEventId) === Number(scheduled.eventId),
    );
    return completed ? time(completed) - time(scheduled) : NaN;
  };
  return { placement: span('placeReplica'), start: span('startShard'), healthy: span('waitHealthy'), events: events.length };
}

async function run(client: Client, env: Record<string, string>, replicas: number): Promise<void> {
  const name = `bench-${replicas}-${Date.now().toString(36)}`;
  const started = Date.now();
  await client.workflow.start('deployModel', {
    workflowId: `deployment/${name}`,
    taskQueue: 'llmgw',
    args: [{ model: 'bench', replicas }],
  });
  for (;;) {
    const view = await client.workflow
      .getHandle(`deployment/${name}`)
      .query(deploymentStatusQuery)
      .catch(() => undefined);
    if (view?.phase === 'Ready') break;
    if (Date.now() - started > 300_000) throw new Error(`${name} not Ready after 300 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const total = Date.now() - started;
  const measured = await Promise.all(Array.from({ length: replicas }, (_, i) => phases(client, `replica/${name}/${i + 1}`)));
  console.log(
    `${String(replicas).padStart(2)} replica(s): all Ready in ${(total / 1000).toFixed(2)} s · median placement ${median(measured.map((m) => m.placement))} ms, start ${median(measured.map((m) => m.start))} ms, healthy ${median(measured.map((m) => m.healthy))} ms · ${median(measured.map((m) => m.events))} history events per replica (median, until Ready)`,
  );
  const undeploy = spawn(process.execPath, [BIN, 'undeploy', name], { env: { ...process.env, ...env }, stdio: 'ignore' });
  await new Promise((r) => undeploy.once('exit', r));
}

async function main(): Promise<void> {
  const port = await findFreePort();
  const server = await startDevServer({ port, headless: true, inMemory: true, logFile: `.llmgw/bench/temporal-${port}.log` });
  // The worker signs revisions with this key and the agents verify them, as in production.
  const keyFile = join(mkdtempSync(join(tmpdir(), 'llmgw-bench-key-')), 'catalog.key');
  ensureCatalogKeyFile(keyFile);
  const env = { TEMPORAL_ADDRESS: server.address, LLMGW_CATALOG_KEY_FILE: keyFile, LLMGW_METRICS_ADDR: 'off' };
  const nodeIds = Array.from({ length: 8 }, (_, i) => `bench-${i}`);
  try {
    await spawnPart(['worker', '--catalog', CATALOG], env);
    await Promise.all(
      nodeIds.map((nodeId, i) =>
        spawnPart(
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
        ),
      ),
    );
    const connection = await Connection.connect({ address: server.address });
    const client = new Client({ connection, dataConverter: llmgwDataConverter() });
    console.log('deploy benchmark: fake engine, load time 0, 8 simulated 8×H100 hosts, dev server in memory, 2-core machine');
    await run(client, env, 1);
    await run(client, env, 32);
    await connection.close();
  } finally {
    for (const child of children) if (child.pid) signalGroup(child.pid, 'SIGTERM');
    await new Promise((r) => setTimeout(r, 3_000));
    killMarkedEngines(nodeIds);
    for (const child of children) if (child.pid) signalGroup(child.pid, 'SIGKILL');
    await server.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
