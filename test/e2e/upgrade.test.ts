// Upgrading llmgw under running workflows: deployments, replicas and nodes started on one
// control-worker build keep working on it (reserve/release, scale, drain, crash recovery)
// after a second build that changes the commands they issue becomes Current, and move to the
// new build at their next continue-as-new when `llmgw upgrade` asks. Own dev server, so that
// changing the Current version touches no other test.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { startDevServer, type DevServer } from '../../temporal/dev-server.js';
import { findFreePort } from '../../common/ports.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { setCurrentVersion } from '../../workers/versioning.js';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import {
  E2E_CATALOG,
  enginesOf,
  eventually,
  INVENTORIES,
  killEnginesOf,
  runLlmgw,
  spawnLlmgw,
  stopAll,
  type LlmgwProcess,
} from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';

const UPGRADED_BUILD = join(__dirname, '../workflows/upgraded.ts');
let server: DevServer;
let client: Client;
let connection: Connection;
let env: Record<string, string>;
const nodeIds = [uniqueId('upg-a'), uniqueId('upg-b')];

async function startWorker(extra: string[] = []): Promise<{ proc: LlmgwProcess; buildId: string }> {
  const proc = spawnLlmgw(['worker', '--catalog', E2E_CATALOG, ...extra], env);
  const line = await proc.waitForOutput(/serving task queue llmgw as llmgw:\S+/, 120_000);
  return { proc, buildId: line.replace(/.*llmgw:/, '') };
}

function status(name: string): Promise<DeploymentView> {
  return client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
}

async function buildOf(workflowId: string): Promise<string> {
  const info = (await client.workflow.getHandle(workflowId).describe()).raw.workflowExecutionInfo?.versioningInfo;
  return info?.versioningOverride?.pinned?.version?.buildId ?? info?.deploymentVersion?.buildId ?? 'unversioned';
}

/** Every run of one workflow id, oldest first, with what ended it: says where a move went wrong. */
async function runsOf(workflowId: string): Promise<string> {
  const lines: string[] = [];
  for await (const run of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
    const history = await client.workflow.getHandle(workflowId, run.runId).fetchHistory();
    const events = history.events ?? [];
    const flagged = events
      .filter((e) => e.workflowTaskStartedEventAttributes?.targetWorkerDeploymentVersionChanged)
      .map((e) => String(e.eventId));
    const last = events.slice(-6).map((e) => String(e.eventType ?? ''));
    const version = String(run.searchAttributes?.TemporalWorkerDeploymentVersion ?? '');
    lines.push(
      `${run.runId} ${run.status.name} ${run.startTime.toISOString()} ${version} target-changed at [${flagged.join(' ')}] last …${last.join(',')}`,
    );
  }
  return lines.reverse().join('\n');
}

async function ready(name: string, count: number): Promise<DeploymentView> {
  return eventually(
    `${name} Ready with ${count}`,
    async () => {
      const view = await status(name);
      return view.phase === 'Ready' && view.ready === count ? view : undefined;
    },
    60_000,
  );
}

beforeAll(async () => {
  const port = await findFreePort();
  server = await startDevServer({
    temporalBin: inject('temporalBin'),
    port,
    headless: true,
    inMemory: true,
    logFile: `.llmgw/test/temporal-upgrade-${port}.log`,
  });
  env = { TEMPORAL_ADDRESS: server.address };
  connection = await Connection.connect({ address: server.address });
  client = new Client({ connection, dataConverter: llmgwDataConverter() });
});

afterAll(async () => {
  await stopAll();
  await killEnginesOf(nodeIds);
  await connection?.close();
  await server?.stop();
});

describe('upgrading llmgw under running workflows', () => {
  it('keeps old runs working on their build, then moves them to the new one at continue-as-new', async () => {
    const a = await startWorker();
    for (const nodeId of nodeIds) {
      const from = 30000 + Math.floor(Math.random() * 300) * 100;
      const stateDir = mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`));
      const agent = spawnLlmgw(
        [
          'agent',
          '--node-id',
          nodeId,
          '--gpus',
          join(INVENTORIES, 'upgx8.yaml'),
          '--state-dir',
          stateDir,
          '--admin-addr',
          '127.0.0.1:0',
          '--port-range',
          `${from}-${from + 99}`,
          '--presence-heartbeat-seconds',
          '5',
        ],
        env,
      );
      await agent.waitForOutput(/registered with node\//, 60_000);
    }
    const old = uniqueId('upg-old');
    expect((await runLlmgw(['deploy', 'upg', '--name', old, '--replicas', '2', '--wait', '--timeout', '60'], env)).code).toBe(0);
    expect(await buildOf(`deployment/${old}`)).toBe(a.buildId);

    // The second build starts beside the first and is made Current: new work goes to it,
    // pinned runs stay on the build that started them.
    const b = await startWorker(['--workflows-module', UPGRADED_BUILD]);
    expect(b.buildId).not.toBe(a.buildId);
    expect(b.proc.output()).toMatch(/is not Current/);
    // The server refuses a new Current version until the new build's worker has polled every
    // task queue the old one serves; setCurrentVersion retries until it accepts.
    await setCurrentVersion(client, { deploymentName: 'llmgw', buildId: b.buildId }, 60_000);

    // Old runs keep working on their build: scale up (reserve), a crash recovery, a drain (release).
    expect((await runLlmgw(['scale', old, '3'], env)).code).toBe(0);
    const three = await ready(old, 3);
    const victim = three.replicas.find((r) => r.phase === 'Ready')!;
    process.kill(victim.shards[0]!.pid, 'SIGKILL');
    await eventually(
      'the crashed replica Ready with a new engine',
      async () => {
        const view = (await status(old)).replicas.find((r) => r.replicaId === victim.replicaId);
        return view?.phase === 'Ready' && view.shards[0]!.pid !== victim.shards[0]!.pid ? view : undefined;
      },
      30_000,
    );
    expect((await runLlmgw(['scale', old, '2'], env)).code).toBe(0);
    const two = await ready(old, 2);
    for (const id of [
      `deployment/${old}`,
      ...two.replicas.filter((r) => r.phase === 'Ready').map((r) => r.replicaId),
      ...nodeIds.map((n) => `node/${n}`),
    ]) {
      expect(await buildOf(id), id).toBe(a.buildId);
    }

    // New work runs the new build's commands: a timer before every activity.
    const fresh = uniqueId('upg-new');
    expect((await runLlmgw(['deploy', 'upg', '--name', fresh, '--replicas', '1', '--wait', '--timeout', '60'], env)).code).toBe(0);
    expect(await buildOf(`deployment/${fresh}`)).toBe(b.buildId);
    const freshReplica = (await status(fresh)).replicas[0]!.replicaId;
    const events = (await client.workflow.getHandle(freshReplica).fetchHistory()).events ?? [];
    const firstActivity = events.findIndex((e) => e.activityTaskScheduledEventAttributes);
    expect(events.slice(0, firstActivity).some((e) => e.timerStartedEventAttributes)).toBe(true);

    // `llmgw upgrade` moves every old run to the new build, engines untouched.
    const pidsBefore = enginesOf(nodeIds)
      .map((e) => e.pid)
      .sort();
    const upgrade = await runLlmgw(['upgrade', '--timeout', '120'], env);
    expect(upgrade.code, upgrade.output).toBe(0);
    console.log(upgrade.output);
    const moved = await ready(old, 2);
    for (const id of [
      `deployment/${old}`,
      ...moved.replicas.filter((r) => r.phase === 'Ready').map((r) => r.replicaId),
      ...nodeIds.map((n) => `node/${n}`),
    ]) {
      const build = await buildOf(id);
      if (build !== b.buildId) console.log(id, await runsOf(id));
      expect(build, id).toBe(b.buildId);
    }
    expect(
      enginesOf(nodeIds)
        .map((e) => e.pid)
        .sort(),
    ).toEqual(pidsBefore);

    // With the old build's worker gone, the moved runs still scale.
    await a.proc.stop();
    expect((await runLlmgw(['scale', old, '3'], env)).code).toBe(0);
    await ready(old, 3);
    await Promise.all([runLlmgw(['undeploy', old], env), runLlmgw(['undeploy', fresh], env)]);
  });
});
