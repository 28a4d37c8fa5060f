// Sleeping replicas survive what the control plane goes through (issue 38, points 3 and 4): an
// agent killed and started again adopts its engines asleep; a control worker killed in the middle
// of a wake leaves the wake to finish; a Temporal that lost everything rebuilds its sleepers as
// sleepers; a rollout replaces sleeping replicas without waking them. A dev server of the file's
// own (it wipes it), a control worker, one simulated host of class SLEEPER, a router, and the fake
// engine, whose wake takes 4 s (`sleeper` in test/fixtures/catalog-e2e.yaml).
import { describe, expect, it, beforeAll } from 'vitest';
import type { Client } from '@temporalio/client';
import { readCmdline } from '../../agent/supervisor/processes/proc.js';
import type { ReplicaView } from '../../common/replica-types.js';
import { sleepReplicaUpdate, wakeReplicaUpdate } from '../../workflows/definitions.js';
import { ROUTES_WORKFLOW_ID, routesQuery } from '../../workflows/routes/definitions.js';
import {
  enginesOf,
  eventually,
  inventory,
  runLlmgw,
  uniqueId,
  usePrivateFleet,
  type FleetAgent,
  type LlmgwProcess,
} from '../helpers/fleet.js';
import { spawnTestRouter, type TestRouter } from '../helpers/router-process.js';

const nodeId = uniqueId('sleeper');
const fleet = usePrivateFleet([nodeId], 'sleep-survives');
const name = uniqueId('sleeper');
const WAKE_MS = 4_000;
let agent: FleetAgent;
let worker: LlmgwProcess;
let router: TestRouter;
let routerUrl = '';

const withClient = <T>(body: (client: Client) => Promise<T>): Promise<T> => fleet.temporal.withClient(body, 5_000);
/** The deployment's replicas that are up (not Stopped or Failed). */
async function replicas(): Promise<ReplicaView[]> {
  return (await fleet.temporal.status(name, 5_000)).replicas.filter((r) => r.phase !== 'Stopped' && r.phase !== 'Failed');
}
const phases = async (): Promise<string[]> => (await replicas()).map((r) => r.phase);
const enginePids = (): number[] =>
  enginesOf([nodeId])
    .map((e) => e.pid)
    .sort();

/** How many times the replica's history (its current run) asked an agent to wake an engine. */
async function wakesIn(replicaId: string): Promise<number> {
  const history = await withClient((client) => client.workflow.getHandle(replicaId).fetchHistory());
  return (history.events ?? []).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'wakeShard').length;
}
const wakesOf = async (ids: string[]): Promise<number[]> => Promise.all(ids.map(wakesIn));

const sleepReplica = (replicaId: string): Promise<ReplicaView> =>
  withClient((client) => client.workflow.getHandle(replicaId).executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] }));

async function ask(): Promise<{ status: number; ms: number; text: string }> {
  const started = performance.now();
  const res = await fetch(`${routerUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sleeper', max_tokens: 4, messages: [{ role: 'user', content: 'hello' }] }),
  });
  const text = await res.text();
  return { status: res.status, ms: performance.now() - started, text };
}

/** Both replicas' routes are in the routes workflow's table as Sleeping, and every router has that table. */
async function routedAsleep(): Promise<boolean> {
  const table = await withClient((client) => client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery));
  const asleep = table.routes.filter((r) => r.deployment === name && r.phase === 'Sleeping');
  const live = table.routers.filter((r) => r.live);
  return asleep.length === 2 && live.length > 0 && live.every((r) => r.applied >= table.version);
}

/** A reconciliation of the node that started after `since` and finished. */
async function reconciledSince(since: Date): Promise<boolean> {
  return withClient(async (client) => {
    const query = `WorkflowType = 'reconcileNode' AND ExecutionStatus = 'Completed' AND StartTime > '${since.toISOString()}'`;
    for await (const run of client.workflow.list({ query })) if (run.workflowId.startsWith(`reconcile/${nodeId}/`)) return true;
    return false;
  });
}

beforeAll(async () => {
  worker = await fleet.worker();
  agent = await fleet.agent(nodeId, { gpus: inventory('sleeperx4.yaml') });
  router = await spawnTestRouter([], fleet.env);
  routerUrl = router.url;
  const deployed = await runLlmgw(
    ['deploy', 'sleeper', '--name', name, '--profile', 'v1', '--replicas', '2', '--wait', '--timeout', '90'],
    fleet.env,
  );
  expect(deployed.code, deployed.output).toBe(0);
  const slept = await runLlmgw(['sleep', name], fleet.env);
  expect(slept.code, slept.output).toBe(0);
  expect(await phases()).toEqual(['Sleeping', 'Sleeping']);
}, 180_000);

describe('sleeping replicas through restarts, a Temporal wipe and a rollout', () => {
  it('keeps its replicas asleep when the agent is killed and started again: the same engines adopted asleep, no wake', async () => {
    const ids = (await replicas()).map((r) => r.replicaId);
    const pids = enginePids();
    const wakes = await wakesOf(ids);
    await agent.proc.kill9();
    const restartedAt = new Date();
    agent = await fleet.agent(nodeId, { gpus: inventory('sleeperx4.yaml'), stateDir: agent.stateDir, range: agent.range });
    expect(agent.proc.output()).toMatch(/2 adopted/);
    // The registration's reconciliation has looked at both engines (it reads /is_sleeping).
    await eventually('a reconciliation after the restart', () => reconciledSince(restartedAt), 60_000, 500);
    expect(await phases()).toEqual(['Sleeping', 'Sleeping']);
    expect(enginePids()).toEqual(pids);
    expect(await wakesOf(ids)).toEqual(wakes);
  }, 120_000);

  it('finishes a wake whose control worker is killed -9 in the middle of it: Ready, serving, the same engine', async () => {
    const [target] = (await replicas()).map((r) => r.replicaId);
    const pids = enginePids();
    const before = await wakesIn(target!);
    const started = Date.now();
    const answer = withClient((client) =>
      client.workflow.getHandle(target!).executeUpdate(wakeReplicaUpdate, { args: [{ by: 'test:worker-restart' }] }),
    ).then(
      (result) => ({ result }),
      (error: unknown) => ({ error }),
    );
    // The agent has been asked to wake the engine (a 4 s wake): the worker dies now.
    await eventually('the wake under way', async () => ((await wakesIn(target!)) > before ? true : undefined), 20_000, 100);
    await worker.kill9();
    const killedAfterMs = Date.now() - started;
    worker = await fleet.worker();
    const settled = await answer;
    // The caller's Update outlives the worker; were it lost, a second ask shares or sees the wake.
    const result =
      'result' in settled
        ? settled.result
        : await withClient((client) =>
            client.workflow.getHandle(target!).executeUpdate(wakeReplicaUpdate, { args: [{ by: 'test:retry' }] }),
          );
    console.log(
      `worker killed ${killedAfterMs} ms into the wake; the Update ${'result' in settled ? 'answered' : `failed (${String(settled.error)}) and a retry answered`} ` +
        `after ${Date.now() - started} ms: ${JSON.stringify(result)}`,
    );
    expect('result' in settled).toBe(true);
    expect(result.alreadyAwake).toBe(false);
    expect(result.wokeInMs).toBeGreaterThanOrEqual(WAKE_MS - 200);
    const view = await eventually(
      'Ready',
      async () => (await replicas()).find((r) => r.replicaId === target && r.phase === 'Ready'),
      30_000,
    );
    expect(view.sleep?.lastWake?.by).toBe('test:worker-restart');
    expect((await ask()).status).toBe(200);
    expect(enginePids()).toEqual(pids);
    expect(await wakesIn(target!)).toBe(before + 1);
  }, 180_000);

  it('rebuilds sleeping replicas as sleeping when Temporal loses everything, and a request then wakes one', async () => {
    const awake = (await replicas()).filter((r) => r.phase === 'Ready');
    for (const r of awake) await sleepReplica(r.replicaId);
    expect(await phases()).toEqual(['Sleeping', 'Sleeping']);
    const pids = enginePids();
    await fleet.temporal.wipe();
    const back = Date.now();
    let seen: ReplicaView[] = [];
    const rebuilt = await eventually(
      'both rebuilt asleep',
      async () => {
        seen = await replicas().catch(() => seen);
        return seen.length === 2 && seen.every((r) => r.phase === 'Sleeping') ? seen : undefined;
      },
      60_000,
      500,
    ).catch((error: unknown) => {
      throw new Error(`${String(error)}; last seen: ${seen.map((r) => `${r.replicaId} ${r.phase}: ${r.reason}`).join('; ')}`);
    });
    console.log(`rebuilt asleep ${Date.now() - back} ms after the empty server came back: ${rebuilt.map((r) => r.reason).join('; ')}`);
    expect(enginePids()).toEqual(pids);
    const ids = rebuilt.map((r) => r.replicaId);
    expect(await wakesOf(ids)).toEqual([0, 0]);
    // The rebuilt replicas' routes, signed (their agent attested the endpoints), reach the router.
    await eventually('both sleeping routes with the router', routedAsleep, 30_000, 100);
    console.log(`both sleeping routes with the router ${Date.now() - back} ms after the empty server came back`);
    const answered = await ask();
    console.log(`the first request after the rebuild answered ${answered.status} in ${answered.ms.toFixed(0)} ms`);
    expect(answered.status, `${answered.text}\n${router.proc.output().slice(-3000)}`).toBe(200);
    expect(answered.ms).toBeGreaterThanOrEqual(WAKE_MS - 200);
    const woken = (await replicas()).filter((r) => r.sleep?.lastWake);
    expect(woken.map((r) => r.sleep?.lastWake?.by)).toEqual([expect.stringMatching(/^router:/)]);
    expect(enginePids()).toEqual(pids);
  }, 180_000);

  it('rolls sleeping replicas to a new revision without waking them: old engines stopped, new ones Ready', async () => {
    for (const r of (await replicas()).filter((x) => x.phase === 'Ready')) await sleepReplica(r.replicaId);
    const old = await replicas();
    expect(old.map((r) => r.phase)).toEqual(['Sleeping', 'Sleeping']);
    const oldPids = enginePids();
    const wakes = await wakesOf(old.map((r) => r.replicaId));
    const rolled = await runLlmgw(['rollout', name, '--profile', 'v2', '--wait', '--timeout', '120'], fleet.env, 150_000);
    expect(rolled.code, rolled.output).toBe(0);
    const view = await fleet.temporal.status(name, 5_000);
    console.log(`rollout ${view.rollout?.state} (${view.rollout?.mode}): ${view.rollout?.steps.join(' | ')}`);
    expect(view.rollout?.state).toBe('Complete');
    expect(await wakesOf(old.map((r) => r.replicaId))).toEqual(wakes);
    const now = await replicas();
    expect(now.map((r) => r.phase)).toEqual(['Ready', 'Ready']);
    expect(now.map((r) => r.replicaId).filter((id) => old.some((o) => o.replicaId === id))).toEqual([]);
    const pids = await eventually('the old engines stopped', () => (enginePids().length === 2 ? enginePids() : undefined), 30_000);
    expect(pids.filter((pid) => oldPids.includes(pid))).toEqual([]);
    for (const pid of pids) expect(readCmdline(pid)?.join(' ')).toMatch(/--tokens-per-second 60/);
    expect((await ask()).status).toBe(200);
  }, 180_000);
});
