// Continue-as-new of every long-running workflow, in every state it can wait in: with a small
// injected history bound, each run hands over to a new one, and the state after the hand-over
// equals the state before it (and the new run carries on: recovers, places, resumes).
// Real dev server, control worker, simulated agents and fake engines.
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Client, WorkflowHandle } from '@temporalio/client';
import type { DeploymentView, ReplicaView } from '../../common/replica-types.js';
import type { NodeView } from '../../common/node-types.js';
import { deploymentStatusQuery, describeNodeQuery, replicaStatusQuery, scaleUpdate, undeployUpdate } from '../../workflows/definitions.js';
import { prepareUpgradeSignal } from '../../workflows/upgrade.js';
import { describeDeployment } from '../../workers/versioning.js';
import { enginesOf, eventually, INVENTORIES, type LlmgwProcess, sleep, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const CAN = join(INVENTORIES, 'canx8.yaml');
const BOUND = 80;
const fleet = useIsolatedFleet({ gpuClass: 'CAN' });
let client: Client;
let buildId = '';

/**
 * A killed agent's return must not race the Lost grace (20 s by default): these tests hand over
 * meanwhile, and on a loaded CI machine the kill, the hand-over and the return took over 60 s.
 */
const HOST_FLAGS = ['--node-continue-as-new-after-events', String(BOUND), '--lost-grace-seconds', '600'];

async function host(): Promise<{ nodeId: string; proc: LlmgwProcess; stateDir: string }> {
  const nodeId = uniqueId('can');
  const started = await fleet.agent(nodeId, { inventory: CAN, extra: HOST_FLAGS });
  return { nodeId, ...started };
}

async function deploy(model: string, profile: string, replicas: number): Promise<WorkflowHandle> {
  const name = uniqueId(model);
  return client.workflow.start('deployModel', {
    workflowId: `deployment/${name}`,
    taskQueue: 'llmgw',
    args: [{ model, profile, replicas, continueAsNewAfterEvents: BOUND }],
  });
}

/**
 * The replica's status once its new run answers: a continued run checks the seal on the state it
 * was handed (an activity) before its queries answer, seconds on a loaded machine. Nodes alike.
 */
async function statusAfterHandOver(handle: WorkflowHandle): Promise<ReplicaView> {
  return eventually('the new run to answer its status query', () => handle.query(replicaStatusQuery).catch(() => undefined), 30_000);
}

/**
 * Adds events that change nothing (a prepareUpgrade naming the build the run is already on)
 * until the run continues as new; returns the new run id. Bounded by time, not count: a run
 * hands over only between steps, and a step (a placement look under load) can outlast any
 * number of quick signals.
 */
async function handOver(workflowId: string): Promise<string> {
  const handle = client.workflow.getHandle(workflowId);
  const before = (await handle.describe()).runId;
  const deadline = Date.now() + 60_000;
  for (let sent = 1; Date.now() < deadline; sent++) {
    if (sent <= 400) await handle.signal(prepareUpgradeSignal, { buildId });
    const now = (await handle.describe()).runId;
    if (now !== before) return now;
    if (sent > 100) await sleep(250);
  }
  throw new Error(`${workflowId} did not continue as new within 60 s of signals`);
}

const replicaState = (v: ReplicaView) => ({
  phase: v.phase,
  reason: v.reason,
  shards: v.shards,
  placements: v.placements,
  restarts: v.restarts,
  endpoint: v.endpoint,
});
const nodeState = (v: NodeView) => ({
  phase: v.phase,
  cordoned: v.cordoned,
  allocations: v.allocations,
  freeGpus: v.freeGpus,
  registrations: v.registrations,
});
const deploymentState = (v: DeploymentView) => ({
  phase: v.phase,
  desired: v.desired,
  replicas: v.replicas.map((r) => [r.replicaId, r.phase]),
});

async function readyReplicas(handle: WorkflowHandle, count: number): Promise<ReplicaView[]> {
  return eventually(
    `${count} Ready replicas of ${handle.workflowId}`,
    async () => {
      const view = await handle.query(deploymentStatusQuery);
      const ready = view.replicas.filter((r) => r.phase === 'Ready');
      return ready.length === count && view.phase === 'Ready' ? ready : undefined;
    },
    60_000,
  );
}

beforeAll(async () => {
  client = fleet.client;
  buildId = (await describeDeployment(client, 'llmgw'))?.current ?? '';
  expect(buildId).not.toBe('');
});

describe('continue-as-new keeps every state', () => {
  it('a Ready replica, a node with allocations and a deployment mid-scale hand over unchanged and carry on', async () => {
    const { nodeId } = await host();
    const deployment = await deploy('can', 'one-gpu', 2);
    const [first] = await readyReplicas(deployment, 2);

    const replica = client.workflow.getHandle(first!.replicaId);
    const replicaBefore = replicaState(await replica.query(replicaStatusQuery));
    await handOver(first!.replicaId);
    expect(replicaState(await statusAfterHandOver(replica))).toEqual(replicaBefore);

    const nodeHandle = client.workflow.getHandle(`node/${nodeId}`);
    const nodeBefore = nodeState(await nodeHandle.query(describeNodeQuery));
    expect(nodeBefore.allocations).toHaveLength(2);
    await handOver(`node/${nodeId}`);
    const nodeAfter = await eventually(
      "the node's new run to answer",
      () => nodeHandle.query(describeNodeQuery).catch(() => undefined),
      30_000,
    );
    expect(nodeState(nodeAfter)).toEqual(nodeBefore);

    // Mid-scale: the deployment hands over while its third replica is still being started.
    await deployment.executeUpdate(scaleUpdate, { args: [3] });
    const midScale = await eventually(
      'the third replica started',
      async () => {
        const view = deploymentState(await deployment.query(deploymentStatusQuery));
        return view.replicas.length === 3 ? view : undefined;
      },
      10_000,
      50,
    );
    expect(midScale.desired).toBe(3);
    await handOver(deployment.workflowId);
    const after = deploymentState(await deployment.query(deploymentStatusQuery));
    expect(after.desired).toBe(3);
    expect(after.replicas.map(([id]) => id)).toEqual(midScale.replicas.map(([id]) => id));
    await readyReplicas(deployment, 3);

    // The continued replica still recovers its engine.
    const pid = replicaBefore.shards[0]!.pid;
    process.kill(pid, 'SIGKILL');
    await eventually(
      'the continued replica Ready with a new engine',
      async () => {
        const view = await replica.query(replicaStatusQuery);
        return view.phase === 'Ready' && view.shards[0]!.pid !== pid ? view : undefined;
      },
      30_000,
    );
    await deployment.executeUpdate(undeployUpdate);
  });

  it('an Unschedulable replica hands over still waiting, then is placed when GPUs are freed', async () => {
    await host();
    const holder = await deploy('can', 'four-gpus', 2);
    await readyReplicas(holder, 2);
    const waiting = await deploy('can', 'four-gpus', 1);
    const stuck = await eventually(
      'an Unschedulable replica',
      async () => (await waiting.query(deploymentStatusQuery)).replicas.find((r) => r.phase === 'Unschedulable'),
      30_000,
    );
    const handle = client.workflow.getHandle(stuck.replicaId);
    const before = replicaState(await handle.query(replicaStatusQuery));
    await handOver(stuck.replicaId);
    expect(replicaState(await statusAfterHandOver(handle))).toEqual(before);

    await holder.executeUpdate(scaleUpdate, { args: [1] });
    await readyReplicas(waiting, 1);
    await Promise.all([holder.executeUpdate(undeployUpdate), waiting.executeUpdate(undeployUpdate)]);
  });

  it('an Unknown replica stays Unknown across the hand-over and is Ready again when its agent returns', async () => {
    const { nodeId, proc, stateDir } = await host();
    const deployment = await deploy('can', 'one-gpu', 1);
    const [ready] = await readyReplicas(deployment, 1);
    const handle = client.workflow.getHandle(ready!.replicaId);
    const pid = ready!.shards[0]!.pid;

    await proc.kill9();
    await eventually('Unknown', async () => ((await handle.query(replicaStatusQuery)).phase === 'Unknown' ? true : undefined), 30_000);
    const before = replicaState(await handle.query(replicaStatusQuery));
    await handOver(ready!.replicaId);
    expect(replicaState(await statusAfterHandOver(handle))).toEqual(before);
    expect(before.phase).toBe('Unknown');

    await fleet.agent(nodeId, {
      inventory: CAN,
      stateDir,
      extra: HOST_FLAGS,
    });
    const back = await eventually(
      'Ready again',
      async () => {
        const view = await handle.query(replicaStatusQuery);
        return view.phase === 'Ready' ? view : undefined;
      },
      30_000,
    ).catch(async (error: unknown) => {
      // CI shows only the failure's message: the replica, its node and its signals go in it.
      const replicaNow = await handle.query(replicaStatusQuery).catch((e: Error) => e.message);
      const nodeNow = await client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);
      const signals = (await handle.fetchHistory()).events
        ?.map((e) => e.workflowExecutionSignaledEventAttributes?.signalName)
        .filter((name) => name !== undefined && name !== prepareUpgradeSignal.name);
      const summary = { replica: replicaNow, node: { phase: nodeNow.phase, reason: nodeNow.reason }, signals };
      throw new Error(`${(error as Error).message}: ${JSON.stringify(summary).slice(0, 2000)}`);
    });
    // The same engine kept serving: the agent adopted it, nothing restarted it.
    expect(back.shards[0]!.pid).toBe(pid);
    expect(enginesOf([nodeId]).map((e) => e.pid)).toContain(pid);
    await deployment.executeUpdate(undeployUpdate);
  });
});
