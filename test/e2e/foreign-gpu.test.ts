// Only what is ours: a real agent discovering a GPU host through the stand-in nvidia-smi,
// which lists a compute process the agent did not start on GPU 3 (a real `sleep`, standing
// in for someone's training job). Reported and left running by default and in dry-run, its
// GPU never allocated; killed, and named, only with --foreign-gpu-processes kill.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isAlive } from '../../common/proc-stat.js';
import { signalGroup } from '../../agent/supervisor/processes/proc.js';
import { findFreePort } from '../../common/ports.js';
import type { NodeView } from '../../common/node-types.js';
import type { ReconcileResult } from '../../common/reconcile-types.js';
import { describeNodeQuery, releaseUpdate, reserveUpdate } from '../../workflows/definitions.js';
import { eventually, runLlmgw, spawnControlWorker, spawnLlmgw, stopAll, type LlmgwProcess } from '../helpers/processes.js';
import { testClient, uniqueId } from '../helpers/temporal.js';
import { signedRelease } from '../helpers/catalog-key.js';

const SMI_DIR = join(__dirname, '../helpers/bin');
const SYSFS = join(__dirname, '../fixtures/sysfs-h100x8');
// GPU 3 of the h100x8 fixture host (test/fixtures/nvidia-smi/h100x8.query-gpu.csv).
const GPU3_UUID = 'GPU-36f675cc-81e7-4ef5-a8e2-5d940ed90475';

let client: Client;
let closeClient: () => Promise<void>;
const jobs: number[] = [];

/** Someone else's job on GPU 3: a real process, and the compute-apps file that lists it. */
function foreignJob(): { pid: number; computeApps: string } {
  const child = spawn('sleep', ['600'], { detached: true, stdio: 'ignore' });
  child.unref();
  const pid = child.pid!;
  jobs.push(pid);
  const computeApps = join(mkdtempSync(join(tmpdir(), 'llmgw-smi-')), 'compute-apps.csv');
  writeFileSync(computeApps, `${pid}, ${GPU3_UUID}, 20480\n`);
  return { pid, computeApps };
}

async function startRealAgent(nodeId: string, computeApps: string, extra: string[]): Promise<LlmgwProcess> {
  const from = ((await findFreePort()) % 20000) + 30000;
  const proc = spawnLlmgw(
    [
      'agent',
      '--node-id',
      nodeId,
      '--gpus',
      'real',
      '--sysfs-root',
      SYSFS,
      '--state-dir',
      mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`)),
      '--admin-addr',
      '127.0.0.1:0',
      '--port-range',
      `${from}-${from + 20}`,
      '--presence-heartbeat-seconds',
      '5',
      ...extra,
    ],
    { PATH: `${SMI_DIR}:${process.env.PATH}`, LLMGW_FAKE_SMI_HOST: 'h100x8', LLMGW_FAKE_SMI_COMPUTE_APPS: computeApps },
  );
  await proc.waitForOutput(/registered with node\//, 60_000);
  return proc;
}

function nodeView(nodeId: string): Promise<NodeView> {
  return client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);
}

/**
 * The reconciliation a registration started, once it has finished. Its id counts the
 * registrations so far, which may be more than one by the time it starts.
 */
async function firstReconcile(nodeId: string): Promise<ReconcileResult> {
  const id = await eventually(
    `a reconcile/${nodeId}/registration-N`,
    async () => {
      for (let n = 1; n <= 5; n++) {
        const candidate = `reconcile/${nodeId}/registration-${n}`;
        if (
          await client.workflow
            .getHandle(candidate)
            .describe()
            .then(
              () => true,
              () => false,
            )
        )
          return candidate;
      }
      return undefined;
    },
    30_000,
  );
  return client.workflow.getHandle(id).result();
}

/**
 * What placement can hand out: the node's free GPUs, and one reserve of as many as it says
 * are free (atomic, so a reconciliation freeing allocations meanwhile cannot blur it), which
 * is then released.
 */
async function allocatable(nodeId: string): Promise<number[]> {
  const handle = client.workflow.getHandle(`node/${nodeId}`);
  const free = (await nodeView(nodeId)).freeGpus;
  const all = await handle.executeUpdate(reserveUpdate, { args: [{ shardId: 'probe.9.r0.a1', replicaId: 'replica/probe/9', count: 8 }] });
  if (free.length < 8) expect(all.ok).toBe(false);
  else await handle.executeUpdate(releaseUpdate, { args: [signedRelease(nodeId, 'probe.9.r0.a1')] });
  const granted = await handle.executeUpdate(reserveUpdate, {
    args: [{ shardId: 'probe.1.r0.a1', replicaId: 'replica/probe/1', count: free.length }],
  });
  expect(granted.ok).toBe(true);
  await handle.executeUpdate(releaseUpdate, { args: [signedRelease(nodeId, 'probe.1.r0.a1')] });
  const indices = granted.ok ? [...granted.gpuIndices].sort() : [];
  expect(indices).toEqual([...free].sort());
  return indices;
}

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
  await spawnControlWorker();
});

afterAll(async () => {
  for (const pid of jobs) if (isAlive(pid)) signalGroup(pid, 'SIGKILL');
  await stopAll();
  await closeClient();
});

describe('compute processes on our GPUs that we did not start', () => {
  it('reports a foreign job on GPU 3 and leaves it running after a start in act mode; GPU 3 is never allocated', async () => {
    const nodeId = uniqueId('foreign-act');
    const job = foreignJob();
    const agent = await startRealAgent(nodeId, job.computeApps, []);
    const reconciled = await firstReconcile(nodeId);
    expect(reconciled.actions.filter((a) => a.kind === 'kill')).toEqual([]);
    expect(isAlive(job.pid)).toBe(true);

    const view = await nodeView(nodeId);
    expect(view.inventory?.foreignProcesses).toEqual([
      expect.objectContaining({ pid: job.pid, gpuIndices: [3], command: 'sleep 600', usedMemoryMib: 20480, killed: false }),
    ]);
    expect(view.inventory?.gpus.find((gpu) => gpu.index === 3)?.problems.join()).toContain(`in use by pid ${job.pid} (sleep 600)`);
    expect(await allocatable(nodeId)).toEqual([0, 1, 2, 4, 5, 6, 7]);
    expect(agent.output()).toMatch(new RegExp(`foreign process pid ${job.pid} \\(sleep 600\\) on GPU\\(s\\) 3.*reported and left running`));

    const nodes = await runLlmgw(['nodes']);
    expect(nodes.output).toContain(`in use by pid ${job.pid} (sleep 600)`);
    // A later reconciliation (a survey) leaves it alone too.
    const again = await runLlmgw(['reconcile', nodeId]);
    expect(again.code, again.output).toBe(0);
    expect(isAlive(job.pid)).toBe(true);
  });

  it('kills nothing in dry-run, even with --foreign-gpu-processes kill, and says what act mode would do', async () => {
    const nodeId = uniqueId('foreign-dry');
    const job = foreignJob();
    const agent = await startRealAgent(nodeId, job.computeApps, ['--reconcile', 'dry-run', '--foreign-gpu-processes', 'kill']);
    const reconciled = await firstReconcile(nodeId);
    expect(reconciled.dryRun).toBe(true);
    expect(isAlive(job.pid)).toBe(true);
    const view = await nodeView(nodeId);
    expect(view.inventory?.foreignProcesses?.[0]).toMatchObject({ pid: job.pid, killed: false });
    expect(view.inventory?.foreignProcesses?.[0]?.note).toMatch(/dry run: act mode would kill it/);
    expect(await allocatable(nodeId)).toEqual([0, 1, 2, 4, 5, 6, 7]);
    expect(agent.output()).toMatch(/0 unidentified killed, 1 foreign on our GPUs \(dry run: nothing killed\)/);
  });

  it('kills it with --foreign-gpu-processes kill, naming it in the log and the registration; GPU 3 is free again', async () => {
    const nodeId = uniqueId('foreign-kill');
    const job = foreignJob();
    const agent = await startRealAgent(nodeId, job.computeApps, ['--foreign-gpu-processes', 'kill']);
    await eventually('the job killed', () => !isAlive(job.pid), 15_000);
    expect(agent.output()).toMatch(new RegExp(`killed foreign process pid ${job.pid} \\(sleep 600\\) on GPU\\(s\\) 3`));
    const view = await nodeView(nodeId);
    expect(view.inventory?.foreignProcesses).toEqual([expect.objectContaining({ pid: job.pid, gpuIndices: [3], killed: true })]);
    expect(view.inventory?.gpus.find((gpu) => gpu.index === 3)?.problems).toEqual([]);
    expect(await allocatable(nodeId)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });
});
