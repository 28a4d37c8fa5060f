// The replica workflow's sleep and wake (issue 38, docs/sleep.md) on a Temporal server of its
// own, with the agent's sleep activities stood in for on the node's queue: the Updates, who may
// sleep when, rank order, a shared wake, a crash while asleep, stopAfterSeconds, a stop while
// asleep, and what a sleep+wake cycle costs in history events. The real engines and agent are
// exercised by test/e2e/sleep-wake.test.ts once the parts are merged.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import type { Client, WorkflowHandle } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { failureMessage } from '../../cli/errors.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { agentTaskQueue } from '../../common/names.js';
import type { ReplicaInput, ReplicaView } from '../../common/replica-types.js';
import type { SleepPolicy } from '../../common/sleep-types.js';
import { ShardState, ShardStatusSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import {
  replicaStatusQuery,
  shardTransitionSignal,
  sleepReplicaUpdate,
  stopReplicaSignal,
  wakeReplicaUpdate,
} from '../../workflows/definitions.js';
import { eventually, sleep } from '../helpers/processes.js';
import { temporalAddress, testClient, uniqueId, useOwnTemporal } from '../helpers/temporal.js';
import {
  agentActivities,
  calls,
  controlActivities,
  gpu,
  NODE,
  permits,
  profile,
  sleepAsks,
  standIn,
  stopAsks,
  WAKE_MS,
} from '../helpers/replica-sleep-stand-ins.js';

const taskQueue = uniqueId('replica-sleep');

let ownTemporal: Awaited<ReturnType<typeof useOwnTemporal>>;
let client: Client;
let closeClient: () => Promise<void>;
let connection: NativeConnection;
let running: Promise<unknown>;
let workers: Worker[] = [];
let seq = 0;

beforeAll(async () => {
  ownTemporal = await useOwnTemporal('replica-sleep');
  ({ client, close: closeClient } = await testClient());
  connection = await NativeConnection.connect({ address: temporalAddress() });
  workers = [
    await Worker.create({
      connection,
      taskQueue,
      dataConverter: llmgwDataConverter(),
      workflowsPath: join(__dirname, '../workflows/index.ts'),
      activities: controlActivities,
    }),
    await Worker.create({ connection, taskQueue: agentTaskQueue(NODE), dataConverter: llmgwDataConverter(), activities: agentActivities }),
  ];
  running = Promise.all(workers.map((w) => w.run()));
}, 180_000);

afterAll(async () => {
  for (const w of workers) w.shutdown();
  await running?.catch(() => undefined);
  await connection?.close();
  await closeClient?.();
  await ownTemporal?.stop();
});

async function startReplica(sleepPolicy?: SleepPolicy, extra: Partial<ReplicaInput> = {}): Promise<WorkflowHandle> {
  seq++;
  const input: ReplicaInput = {
    deployment: 'sleepy',
    seq,
    profile: profile(sleepPolicy),
    deploymentWorkflowId: 'deployment/sleepy',
    drainGraceSeconds: 0,
    ...extra,
  };
  const handle = await client.workflow.start('replica', { taskQueue, workflowId: `replica/sleepy/${seq}-${uniqueId('r')}`, args: [input] });
  await phaseIs(handle, 'Ready');
  return handle;
}

async function phaseIs(handle: WorkflowHandle, phase: ReplicaView['phase']): Promise<ReplicaView> {
  return eventually(
    `${handle.workflowId} ${phase}`,
    async () => {
      const view = await handle.query(replicaStatusQuery).catch(() => undefined);
      return view?.phase === phase ? view : undefined;
    },
    30_000,
  );
}

async function historyLength(handle: WorkflowHandle): Promise<number> {
  return (await handle.fetchHistory()).events?.length ?? 0;
}

/** The words an Update's refusal or failure says (the operator's, as the CLI prints them). */
async function refusal(update: Promise<unknown>): Promise<string> {
  try {
    await update;
  } catch (error) {
    return failureMessage(error);
  }
  throw new Error('the Update was not refused');
}

function since(mark: number): string[] {
  return calls.slice(mark);
}

const POLICY: SleepPolicy = { afterSeconds: 60, level: 1, minAwakeSeconds: 0 };

describe('a replica put to sleep and woken through its Updates', () => {
  it('sleeps every rank in order, holds still while asleep, and wakes once for two wakes', async () => {
    const handle = await startReplica(POLICY);
    const before = await historyLength(handle);
    let mark = calls.length;
    let permitMark = permits.length;
    const asleep = await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test', level: 2, reason: 'idle' }] });
    // Its GPU shares go back to the node once both engines sleep (docs/sleep.md, "Sharing GPUs").
    expect(permits.slice(permitMark).sort()).toEqual(['asleep r0.a1', 'asleep r1.a1']);
    expect(asleep.phase).toBe('Sleeping');
    expect(asleep.sleep).toMatchObject({ level: 2 });
    expect(since(mark).map((c) => c.replace(/^.*(r\d)\.a\d/, '$1'))).toEqual(['r0 level 2', 'r1 level 2']);
    // Asleep, nothing polls: the history does not grow.
    const asleepLength = await historyLength(handle);
    await sleep(3_000);
    expect(await historyLength(handle)).toBe(asleepLength);

    mark = calls.length;
    permitMark = permits.length;
    const [first, second] = await Promise.all([
      handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'router:a' }] }),
      handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'router:b' }] }),
    ]);
    expect(since(mark).filter((c) => c.startsWith('wake'))).toHaveLength(2); // one wake: one call per rank
    // Each rank's node granted it room before it woke.
    expect(permits.slice(permitMark).sort()).toEqual(['permit r0.a1', 'permit r1.a1']);
    // Both waited for the one wake of both ranks (the second from its own acceptance).
    expect(first.alreadyAwake || second.alreadyAwake).toBe(false);
    expect(Math.max(first.wokeInMs, second.wokeInMs)).toBeGreaterThanOrEqual(2 * WAKE_MS - 50);
    expect(Math.min(first.wokeInMs, second.wokeInMs)).toBeGreaterThanOrEqual(WAKE_MS - 50);
    const awake = await phaseIs(handle, 'Ready');
    // The wake is the first accepted one's.
    expect(['router:a', 'router:b']).toContain(awake.sleep?.lastWake?.by);
    expect(awake.sleep?.lastWake?.tookMs).toBeGreaterThanOrEqual(2 * WAKE_MS - 50);
    expect(awake.sleep?.since).toBeUndefined();
    // Awake already: answered at once, nothing called.
    mark = calls.length;
    const again = await handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'router:a' }] });
    expect(again).toMatchObject({ alreadyAwake: true, wokeInMs: 0 });
    expect(since(mark)).toEqual([]);
    const after = await historyLength(handle);
    console.log(`sleep+wake cycle (2 ranks, two wakes and one already-awake wake): ${after - before} events`);
    await handle.signal(stopReplicaSignal, { reason: 'test over' });
    await handle.result();
  }, 120_000);

  it('costs a few dozen history events per sleep and wake, and none while asleep', async () => {
    const handle = await startReplica(POLICY);
    const start = await historyLength(handle);
    await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] });
    const asleep = await historyLength(handle);
    await sleep(2_000);
    expect(await historyLength(handle)).toBe(asleep);
    await handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'test' }] });
    await phaseIs(handle, 'Ready');
    const awake = await historyLength(handle);
    const events = (await handle.fetchHistory()).events ?? [];
    const kinds: Record<string, number> = {};
    for (const e of events.slice(start)) {
      const kind = String(e.eventType ?? '?');
      kinds[kind] = (kinds[kind] ?? 0) + 1;
    }
    console.log(`events: sleep ${asleep - start}, wake ${awake - asleep}; ${JSON.stringify(kinds)}`);
    // 2 ranks: a bound that any polling, or a timer per wait, would break. Since GPUs are shared by
    // sleepers, the wake asks its nodes for room and the sleep gives it back: one call each (~6 events).
    expect(awake - start).toBeLessThanOrEqual(72);
    await handle.signal(stopReplicaSignal, { reason: 'test over' });
    await handle.result();
  }, 120_000);

  it('wakes right after falling asleep when a wake comes meanwhile', async () => {
    const handle = await startReplica(POLICY);
    standIn.sleepMs = 500;
    try {
      const sleeping = handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'autoscaler' }] });
      await phaseIs(handle, 'Sleeping');
      const mark = calls.length;
      const woken = await handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'router:a' }] });
      expect((await sleeping).phase).toBe('Sleeping');
      expect(woken.alreadyAwake).toBe(false);
      expect(since(mark).filter((c) => c.startsWith('wake'))).toHaveLength(2);
      expect((await phaseIs(handle, 'Ready')).sleep?.lastWake?.by).toBe('router:a');
    } finally {
      standIn.sleepMs = 0;
    }
    await handle.signal(stopReplicaSignal, { reason: 'test over' });
    await handle.result();
  }, 120_000);

  it('refuses a sleep it cannot honour, naming why', async () => {
    const never = await startReplica();
    expect(await refusal(never.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] }))).toMatch(/no sleep policy/);
    await never.signal(stopReplicaSignal, { reason: 'test over' });

    const handle = await startReplica({ ...POLICY, minAwakeSeconds: 3600 });
    await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] });
    expect(await refusal(handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] }))).toMatch(/asleep already/);
    await handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'test' }] });
    expect(await refusal(handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] }))).toMatch(/minAwakeSeconds/);
    // An operator who means it.
    const forced = await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test', force: true }] });
    expect(forced.phase).toBe('Sleeping');
    await handle.signal(stopReplicaSignal, { reason: 'test over' });
    await handle.result();
  }, 120_000);

  it('makes room on a full GPU: asks the least recently woken holder to sleep, waits out its minAwakeSeconds', async () => {
    const handle = await startReplica(POLICY);
    await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] });
    const holders = [{ replicaId: 'replica/other/1', shardIds: ['s'], awakeSince: '' }];
    Object.assign(gpu, { full: 2, holders, busyUntil: new Date(Date.now() + 2_000).toISOString() });
    const mark = sleepAsks.length;
    const woken = await handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'test' }] });
    // Refused (the holder within minAwakeSeconds), waited ~2 s, asked again: refused, slept, granted.
    expect(sleepAsks.slice(mark)).toEqual([
      expect.objectContaining({ replicaId: 'replica/other/1', by: `replica:${handle.workflowId}` }),
      expect.objectContaining({ replicaId: 'replica/other/1' }),
    ]);
    expect(woken.wokeInMs).toBeGreaterThanOrEqual(1_900);
    await phaseIs(handle, 'Ready');

    // A GPU that stays full with nobody to ask: the wake fails, and the replica stays asleep.
    await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test', force: true }] });
    Object.assign(gpu, { full: 1, holders: [] });
    expect(await refusal(handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'test' }] }))).toMatch(/did not grant.*stays asleep/);
    expect((await phaseIs(handle, 'Sleeping')).reason).toMatch(/found no room/);
    await handle.signal(stopReplicaSignal, { reason: 'test over' });
    await handle.result();
  }, 120_000);

  it('stays asleep when a rank runs out of GPU memory waking; places again one that dies asleep with no room', async () => {
    const handle = await startReplica(POLICY);
    await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] });
    standIn.wakeOutOfMemory = true;
    let mark = calls.length;
    const told = permits.length;
    expect(await refusal(handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'test' }] }))).toMatch(
      /did not fit on its GPU.*stays asleep/,
    );
    // Rank 0 woke, rank 1 did not fit, rank 0 went back to sleep; no engine was restarted.
    expect(since(mark).map((c) => c.split(' ')[0])).toEqual(['wake', 'wake', 'sleep']);
    expect(permits.slice(told).filter((p) => p.startsWith('asleep'))).toHaveLength(2);
    expect((await phaseIs(handle, 'Sleeping')).reason).toMatch(/ran out of GPU memory/);

    // An engine that dies asleep where the node has no room for it awake is not restarted there
    // (it would run awake while the node counts it asleep): the replica is placed again.
    Object.assign(gpu, { full: 1, holders: [] });
    const leader = (await handle.query(replicaStatusQuery)).shards.find((s) => s.rank === 0)!;
    mark = calls.length;
    await handle.signal(
      shardTransitionSignal,
      create(ShardStatusSchema, { shardId: leader.shardId, state: ShardState.FAILED, pid: leader.pid, message: 'killed' }),
    );
    const back = await phaseIs(handle, 'Ready');
    const restartedInPlace = since(mark).filter((c) => c === `start ${leader.shardId.slice(-5)}`);
    expect(restartedInPlace).toEqual([]);
    expect(back.shards.map((s) => s.shardId)).not.toContain(leader.shardId);
    await handle.signal(stopReplicaSignal, { reason: 'test over' });
    await handle.result();
  }, 120_000);

  it('stays Ready, its ranks awake again, when an engine will not sleep', async () => {
    const handle = await startReplica(POLICY);
    standIn.failNextSleep = true;
    const mark = calls.length;
    expect(await refusal(handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] }))).toMatch(/would not sleep.*stays Ready/);
    expect(since(mark).map((c) => c.split(' ')[0])).toEqual(['sleep', 'sleep', 'wake']);
    await phaseIs(handle, 'Ready');
    await handle.signal(stopReplicaSignal, { reason: 'test over' });
    await handle.result();
  }, 120_000);

  it('recovers an engine that dies asleep, and stops asleep when told', async () => {
    const handle = await startReplica(POLICY);
    const asleep = await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] });
    const leader = asleep.shards.find((s) => s.rank === 0)!;
    let mark = calls.length;
    await handle.signal(
      shardTransitionSignal,
      create(ShardStatusSchema, { shardId: leader.shardId, state: ShardState.FAILED, pid: leader.pid, message: 'killed' }),
    );
    await eventually('restarted', async () => (since(mark).some((c) => c.startsWith('start')) ? true : undefined), 30_000);
    const back = await phaseIs(handle, 'Ready');
    expect(back.sleep?.since).toBeUndefined();

    await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] });
    mark = calls.length;
    await handle.signal(stopReplicaSignal, { reason: 'scaled to 0' });
    const final = (await handle.result()) as ReplicaView;
    expect(final.phase).toBe('Stopped');
    expect(since(mark).filter((c) => c.startsWith('stop'))).toHaveLength(2);
  }, 120_000);

  it('stays asleep across a hand-over to a new run, and wakes there', async () => {
    // Low enough that the run which puts it to sleep passes it while asleep (a sleep is ~30 events).
    const handle = await startReplica(POLICY, { continueAsNewAfterEvents: 25 });
    // A run handing over refuses the sleep (ask again in a moment): ask until one takes it.
    let sleptIn = '';
    await eventually(
      'asleep',
      async () => {
        sleptIn = (await handle.describe()).runId;
        return (await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] }).catch(() => undefined))?.phase;
      },
      30_000,
    );
    const mark = calls.length;
    await eventually('a new run', async () => ((await handle.describe()).runId !== sleptIn ? true : undefined), 30_000);
    const view = await phaseIs(handle, 'Sleeping');
    expect(view.sleep?.since).toBeDefined();
    // The new run resumed asleep: nothing was started or put to sleep again.
    expect(since(mark)).toEqual([]);
    const woken = await handle.executeUpdate(wakeReplicaUpdate, { args: [{ by: 'test' }] });
    expect(woken.alreadyAwake).toBe(false);
    expect((await phaseIs(handle, 'Ready')).sleep?.lastWake?.by).toBe('test');
    // Stopped once the run after the wake's hand-over is settled: a signal that lands while a run
    // completes its continue-as-new can be lost (reported with issue 38; not the sleep's doing).
    await eventually('the run after the wake', async () => ((await handle.describe()).historyLength < 10 ? true : undefined), 30_000);
    await sleep(1_000);
    await handle.signal(stopReplicaSignal, { reason: 'test over' });
    await eventually('stopped', async () => ((await handle.describe()).status.name === 'COMPLETED' ? true : undefined), 30_000);
  }, 120_000);

  it('asks its deployment for one replica fewer after stopAfterSeconds asleep, once', async () => {
    const handle = await startReplica({ ...POLICY, stopAfterSeconds: 2 });
    await handle.executeUpdate(sleepReplicaUpdate, { args: [{ by: 'test' }] });
    await eventually('asked', async () => (stopAsks.some((a) => a.replicaId === handle.workflowId) ? true : undefined), 20_000);
    await sleep(3_000);
    expect(stopAsks.filter((a) => a.replicaId === handle.workflowId)).toEqual([
      { deployment: 'sleepy', replicaId: handle.workflowId, asleepSeconds: 2 },
    ]);
    expect((await handle.query(replicaStatusQuery)).phase).toBe('Sleeping');
    await handle.signal(stopReplicaSignal, { reason: 'test over' });
    await handle.result();
  }, 120_000);
});
