// Day-two safety of the long-running workflows: a replica waiting for capacity costs a handful
// of events and is placed within seconds of capacity being freed; an Update sent right after a
// deployment starts is accepted; an agent restarted with other flags changes its node's
// Schedule and reconcile mode; a name deployed again never reuses a sequence number.
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import type { Client } from '@temporalio/client';
import type { DeploymentView } from '../../common/replica-types.js';
import { reconcileScheduleId } from '../../common/names.js';
import { temporalCliAddress, temporalStartDeployment } from '../helpers/temporal-cli.js';
import { deploymentStatusQuery, describeNodeQuery, scaleUpdate, undeployUpdate } from '../../workflows/definitions.js';
import { enginesOf, eventually, INVENTORIES, type LlmgwProcess, sleep, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const DAY = join(INVENTORIES, 'dayx8.yaml');
/** How long the Unschedulable replica is left waiting (LLMGW_UNSCHEDULABLE_WAIT_SECONDS=600 for the 10-minute figure). */
const WAIT_SECONDS = Number(process.env.LLMGW_UNSCHEDULABLE_WAIT_SECONDS ?? 45);
const fleet = useIsolatedFleet({ gpuClass: 'DAY' });
let client: Client;

async function host(
  extra: string[] = [],
  nodeId = uniqueId('day'),
  stateDir?: string,
): Promise<{ nodeId: string; stateDir: string; proc: LlmgwProcess }> {
  const started = await fleet.agent(nodeId, { inventory: DAY, extra, stateDir });
  return { nodeId, ...started };
}

function deployment(name: string): { query(): Promise<DeploymentView> } {
  return { query: () => client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery) };
}

async function deploy(profile: string, replicas: number, name = uniqueId('day')): Promise<string> {
  await client.workflow.start('deployModel', {
    workflowId: `deployment/${name}`,
    taskQueue: 'llmgw',
    args: [{ model: 'day', name, profile, replicas }],
  });
  return name;
}

async function ready(name: string, count: number, timeoutMs = 60_000): Promise<DeploymentView> {
  return eventually(
    `${name} Ready with ${count}`,
    async () => {
      const view = await deployment(name).query();
      return view.phase === 'Ready' && view.ready === count ? view : undefined;
    },
    timeoutMs,
    50,
  );
}

async function historyLength(workflowId: string): Promise<number> {
  return Number((await client.workflow.getHandle(workflowId).describe()).historyLength);
}

beforeAll(async () => {
  client = fleet.client;
});

describe('day-two safety', () => {
  it(
    `leaves a replica Unschedulable for ${WAIT_SECONDS} s at a handful of events, and places it within 2 s of capacity being freed`,
    async () => {
      const { nodeId } = await host();
      const holder = await deploy('four-gpus', 2);
      await ready(holder, 2);
      const waiter = await deploy('four-gpus', 1);
      const stuck = await eventually(
        'Unschedulable',
        async () => (await deployment(waiter).query()).replicas.find((r) => r.phase === 'Unschedulable'),
        30_000,
      );
      expect(stuck.reason).toMatch(/needs 4 GPUs, 0 free/);
      // Let the start settle (placement, the first publish), then measure the wait itself.
      await sleep(2_000);
      const replicaBefore = await historyLength(stuck.replicaId);
      const nodeBefore = await historyLength(`node/${nodeId}`);
      await sleep(WAIT_SECONDS * 1000);
      const replicaAdded = (await historyLength(stuck.replicaId)) - replicaBefore;
      const nodeAdded = (await historyLength(`node/${nodeId}`)) - nodeBefore;
      console.log(`Unschedulable for ${WAIT_SECONDS} s: the replica added ${replicaAdded} events, its node ${nodeAdded}`);
      expect(replicaAdded).toBeLessThanOrEqual(30);
      expect(nodeAdded).toBeLessThanOrEqual(5);

      await client.workflow.getHandle(`deployment/${holder}`).executeUpdate(scaleUpdate, { args: [1] });
      const node = client.workflow.getHandle(`node/${nodeId}`);
      await eventually(
        'four GPUs freed',
        async () => ((await node.query(describeNodeQuery)).freeGpus.length >= 4 ? true : undefined),
        30_000,
        20,
      );
      const freedAt = Date.now();
      await ready(waiter, 1, 20_000);
      const latency = Date.now() - freedAt;
      console.log(`Unschedulable → Ready ${latency} ms after capacity was freed`);
      expect(latency).toBeLessThanOrEqual(2_000);
    },
    (WAIT_SECONDS + 100) * 1000,
  );

  it('accepts `temporal workflow update execute --name scale` sent within 100 ms of `temporal workflow start`', async () => {
    await host();
    const name = uniqueId('day-early');
    const temporal = inject('temporalBin');
    const address = temporalCliAddress();
    temporalStartDeployment(name, JSON.stringify({ model: 'day', profile: 'one-gpu', replicas: 1 }), { stdio: 'pipe' });
    const startedAt = Date.now();
    const update = spawn(
      temporal,
      ['workflow', 'update', 'execute', '--workflow-id', `deployment/${name}`, '--name', 'scale', '--input', '2', ...address],
      { stdio: 'pipe' },
    );
    const gapMs = Date.now() - startedAt;
    let output = '';
    update.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    update.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => update.once('exit', resolve));
    console.log(`scale sent ${gapMs} ms after the start returned; exit ${code}`);
    expect(gapMs).toBeLessThan(100);
    expect(code, output).toBe(0);
    expect((await ready(name, 2)).desired).toBe(2);
  });

  it('follows an agent restarted with other settings: the Schedule interval changes, and act after dry-run acts', async () => {
    const first = await host(['--reconcile', 'dry-run', '--reconcile-every-seconds', '120']);
    const schedule = client.schedule.getHandle(reconcileScheduleId(first.nodeId));
    const interval = async (): Promise<[number, boolean]> => {
      const described = await schedule.describe();
      const args = described.action.type === 'startWorkflow' ? (described.action.args?.[0] as { dryRun?: boolean }) : undefined;
      return [Number(described.spec.intervals?.[0]?.every), Boolean(args?.dryRun)];
    };
    expect(await eventually('the Schedule', () => interval().catch(() => undefined), 20_000)).toEqual([120_000, true]);

    // An engine whose replica workflow is gone: dry-run only shows the stop.
    const name = await deploy('one-gpu', 1);
    const [replica] = (await ready(name, 1)).replicas;
    await client.workflow.getHandle(`deployment/${name}`).terminate('test: its replica is orphaned on purpose');
    await client.workflow.getHandle(replica!.replicaId).terminate('test: an engine nobody wants');
    const pid = replica!.shards[0]!.pid;
    await first.proc.stop();
    fleet.agents = fleet.agents.filter((a) => a !== first.proc);
    await host(['--reconcile', 'dry-run', '--reconcile-every-seconds', '120'], first.nodeId, first.stateDir);
    await sleep(3_000);
    expect(enginesOf([first.nodeId]).map((e) => e.pid)).toContain(pid);

    // The same host, restarted with --reconcile act and another interval.
    await fleet.agents.pop()!.stop();
    await host(['--reconcile', 'act', '--reconcile-every-seconds', '30'], first.nodeId, first.stateDir);
    expect(
      await eventually('the Schedule updated', async () => ((await interval())[0] === 30_000 ? interval() : undefined), 20_000),
    ).toEqual([30_000, false]);
    await eventually(
      'the orphaned engine stopped',
      () => (enginesOf([first.nodeId]).some((e) => e.pid === pid) ? undefined : true),
      30_000,
    );
  });

  it('notices a waiting replica that the server ended without an engine, and replaces it', async () => {
    await host();
    const name = await deploy('four-gpus', 3);
    const stuck = await eventually(
      'Unschedulable',
      async () => (await deployment(name).query()).replicas.find((r) => r.phase === 'Unschedulable'),
      30_000,
    );
    await client.workflow.getHandle(stuck.replicaId).terminate('test: ended by the server');
    const view = await eventually(
      'the replica marked Failed and a replacement started',
      async () => {
        const v = await deployment(name).query();
        const ended = v.replicas.find((r) => r.replicaId === stuck.replicaId);
        return ended?.phase === 'Failed' && v.replicas.some((r) => r.seq > stuck.seq) ? v : undefined;
      },
      // 9 s alone; on the shared CI server a control activity on the way (20 s start-to-close)
      // can sit on a worker another file is stopping, and is retried only after that timeout.
      60_000,
    );
    expect(view.replicas.find((r) => r.replicaId === stuck.replicaId)!.reason).toMatch(/terminated/);
  });

  it('never reuses a sequence number when a name is undeployed and deployed again', async () => {
    await host();
    const name = uniqueId('day-seq');
    await deploy('one-gpu', 2, name);
    const firstSeqs = (await ready(name, 2)).replicas.map((r) => r.seq);
    await client.workflow.getHandle(`deployment/${name}`).executeUpdate(undeployUpdate);
    await client.workflow.getHandle(`deployment/${name}`).result();
    await deploy('one-gpu', 2, name);
    const secondSeqs = (await ready(name, 2)).replicas.map((r) => r.seq);
    console.log(`first incarnation seqs ${firstSeqs.join(',')}, second ${secondSeqs.join(',')}`);
    expect(Math.min(...secondSeqs)).toBeGreaterThan(Math.max(...firstSeqs));
  });
});
