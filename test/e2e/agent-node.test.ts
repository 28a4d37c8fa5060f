// The agent and the node workflow together, with a real dev server, a real control
// worker, real agent processes and real fake-engine processes.
import { join } from 'node:path';
import { mkdtempSync, readFileSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { ApplicationFailure, WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure } from '@temporalio/common';
import { create } from '@bufbuild/protobuf';
import {
  Engine,
  StopShardSchema,
  WaitHealthySchema,
  type RunningShard,
  type ShardStatus,
  type StopShardResult,
} from '../../proto/gen/llmgw/v1/shard_pb.js';
import { describeNodeQuery, releaseUpdate, reserveUpdate } from '../../workflows/definitions.js';
import { recordHistory } from '../helpers/histories.js';
import type { NodeView, ReserveResult } from '../../common/node-types.js';
import { findFreePort } from '../../common/ports.js';
import { connectAdmin } from '../../agent/admin/client.js';
import { readEnviron } from '../../agent/supervisor/processes/proc.js';
import { uniqueId } from '../helpers/temporal.js';
import { useCallWorker } from '../helpers/call-worker.js';
import { enginesOf, eventually, sleep, spawnLlmgw, type LlmgwProcess } from '../helpers/processes.js';
import { fakeShardSpec } from '../helpers/shards.js';
import { signedRelease } from '../helpers/catalog-key.js';
import type { AgentCall } from '../workflows/agent-calls.js';

const nodeIds: string[] = [];
const calls = useCallWorker('agent-e2e', nodeIds);

async function portRange(): Promise<string> {
  const from = ((await findFreePort()) % 20000) + 30000;
  return `${from}-${from + 40}`;
}

async function startAgent(
  nodeId: string,
  options: { gpus?: string; stateDir?: string; range?: string; extra?: string[]; env?: Record<string, string> } = {},
): Promise<{ proc: LlmgwProcess; stateDir: string; adminAddress: string }> {
  if (!nodeIds.includes(nodeId)) nodeIds.push(nodeId);
  const stateDir = options.stateDir ?? mkdtempSync(join(tmpdir(), `llmgw-${nodeId}-`));
  const proc = spawnLlmgw(
    [
      'agent',
      '--node-id',
      nodeId,
      '--gpus',
      options.gpus ?? 'builtin:h100x8',
      '--state-dir',
      stateDir,
      '--port-range',
      options.range ?? (await portRange()),
      '--presence-heartbeat-seconds',
      '5',
      '--lost-grace-seconds',
      '300',
      '--reconcile',
      'dry-run',
      ...(options.extra ?? []),
    ],
    options.env,
  );
  await proc.waitForOutput(/registered with node\//, 60_000);
  const adminAddress = /admin API on (\S+)/.exec(proc.output())![1]!;
  return { proc, stateDir, adminAddress };
}

function call<T>(nodeId: string, activity: AgentCall, arg?: unknown): Promise<T> {
  // A start is sent by the workflow of the replica its placement ticket names, as in production.
  const replicaId = activity === 'startShard' ? (arg as { replicaId?: string }).replicaId : undefined;
  return calls.call<T>(nodeId, activity, arg, replicaId ?? uniqueId('agent-call'));
}

function nodeView(nodeId: string): Promise<NodeView> {
  return calls.client().workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);
}

async function health(port: number): Promise<number> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/health`)).status;
  } catch {
    return 0;
  }
}

describe('agent and node workflow', () => {
  it('registers a simulated 8×H100 host: node/<id> is Ready with LlmgwFreeGpus=8 and a heartbeating presence activity', async () => {
    const nodeId = uniqueId('h100');
    await startAgent(nodeId);
    const handle = calls.client().workflow.getHandle(`node/${nodeId}`);
    const description = await eventually('presence heartbeat', async () => {
      const d = await handle.describe();
      const pending = d.raw.pendingActivities?.[0];
      return pending?.lastHeartbeatTime ? d : undefined;
    });
    expect(description.status.name).toBe('RUNNING');
    expect(description.searchAttributes.LlmgwFreeGpus).toEqual([8]);
    expect(description.searchAttributes.LlmgwState).toEqual(['Ready']);
    expect(description.searchAttributes.LlmgwGpuClass).toEqual(['H100']);
    expect(description.raw.pendingActivities?.[0]?.activityType?.name).toBe('presence');
    const view = await nodeView(nodeId);
    expect(view.phase).toBe('Ready');
    expect(view.freeGpus).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('records a node workflow through registration, reserves, release and its agent dying (history replayed in CI)', async () => {
    const nodeId = uniqueId('history');
    const agent = await startAgent(nodeId);
    const handle = calls.client().workflow.getHandle(`node/${nodeId}`);
    await handle.executeUpdate(reserveUpdate, { args: [{ shardId: 'h.1.r0.a1', replicaId: 'replica/h/1', count: 2 }] });
    await handle.executeUpdate(releaseUpdate, { args: [signedRelease(nodeId, 'h.1.r0.a1')] });
    await agent.proc.kill9();
    await eventually('NotReady', async () => (await nodeView(nodeId)).phase === 'NotReady', 15_000);
    recordHistory(`node/${nodeId}`, 'node-register-reserve-release-notready');
  });

  it('starts a fake engine with exactly its GPUs, waits for health after the load time, and starts nothing on a second identical startShard', async () => {
    const nodeId = uniqueId('start');
    await startAgent(nodeId);
    const spec = fakeShardSpec({ nodeId, deployment: 'start-test', gpus: [2, 5], args: ['--load-time', '2'] });
    const first = await call<RunningShard>(nodeId, 'startShard', spec);
    const pid = first.status!.pid;
    expect(pid).toBeGreaterThan(0);
    expect(readEnviron(pid)?.CUDA_VISIBLE_DEVICES).toBe('2,5');
    expect(readEnviron(pid)?.LLMGW_SHARD_ID).toBe(spec.shardId);
    const started = Date.now();
    const ready = await call<ShardStatus>(nodeId, 'waitHealthy', create(WaitHealthySchema, { shardId: spec.shardId, timeoutSeconds: 30 }));
    expect(ready.state).toBe(4 /* READY */);
    expect(Date.now() - started).toBeGreaterThan(500);
    expect(await health(ready.httpPort)).toBe(200);
    const second = await call<RunningShard>(nodeId, 'startShard', spec);
    expect(second.status!.pid).toBe(pid);
    expect(enginesOf([nodeId]).map((engine) => engine.pid)).toEqual([pid]);
  });

  it('keeps an engine serving when its agent is killed -9, and adopts the same pid when the agent returns; stopShard then ends it and removes its spec', async () => {
    const nodeId = uniqueId('adopt');
    const first = await startAgent(nodeId);
    const spec = fakeShardSpec({ nodeId, deployment: 'adopt-test', gpus: [0], args: ['--load-time', '0'] });
    // One run chain starts and later stops the engine, as its replica does.
    const replica = await calls.session(nodeId, spec.replicaId);
    const running = await replica.call<RunningShard>('startShard', spec);
    const ready = await call<ShardStatus>(nodeId, 'waitHealthy', create(WaitHealthySchema, { shardId: spec.shardId, timeoutSeconds: 30 }));
    await first.proc.kill9();
    for (let i = 0; i < 5; i++) {
      expect(await health(ready.httpPort)).toBe(200);
      await sleep(200);
    }
    const second = await startAgent(nodeId, { stateDir: first.stateDir });
    expect(second.proc.output()).toMatch(/1 adopted/);
    const admin = connectAdmin(second.adminAddress);
    try {
      const described = (await admin.describe()).register!;
      const shard = described.runningShards.find((s) => s.spec?.shardId === spec.shardId);
      expect(shard?.adopted).toBe(true);
      expect(shard?.status?.pid).toBe(running.status!.pid);
    } finally {
      admin.close();
    }
    expect(enginesOf([nodeId]).map((engine) => engine.pid)).toEqual([running.status!.pid]);
    const stopped = await replica.call<StopShardResult>(
      'stopShard',
      create(StopShardSchema, { shardId: spec.shardId, replicaId: spec.replicaId, graceSeconds: 5 }),
    );
    await replica.end();
    expect(stopped.wasRunning).toBe(true);
    expect(enginesOf([nodeId])).toEqual([]);
    expect(existsSync(join(first.stateDir, 'shards', `${spec.shardId}.json`))).toBe(false);
  });

  it('kills, when it starts, a hand-started process carrying its node id and an engine whose spec was corrupted, logging each', async () => {
    const nodeId = uniqueId('ghost');
    const first = await startAgent(nodeId);
    const spec = fakeShardSpec({ nodeId, deployment: 'corrupt-test', gpus: [1], args: ['--load-time', '0'] });
    const corrupted = await call<RunningShard>(nodeId, 'startShard', spec);
    await first.proc.kill9();
    writeFileSync(join(first.stateDir, 'shards', `${spec.shardId}.json`), '{ this is not json');
    const ghostPort = await findFreePort();
    const ghost = spawn(process.execPath, [join(__dirname, '../../bin/llmgw.js'), 'fake-engine', '--port', String(ghostPort)], {
      env: { ...process.env, LLMGW_NODE_ID: nodeId, LLMGW_SHARD_ID: 'ghost.1.r0.a1' },
      stdio: 'ignore',
      detached: true,
    });
    await eventually('ghost engine up', async () => (await health(ghostPort)) === 200);
    // Act mode: in dry-run an agent kills nothing at all.
    const second = await startAgent(nodeId, { stateDir: first.stateDir, extra: ['--reconcile', 'act'] });
    const output = second.proc.output();
    expect(output).toMatch(new RegExp(`pid ${ghost.pid}\\b.*no (readable )?spec`));
    expect(output).toMatch(new RegExp(`pid ${corrupted.status!.pid}\\b`));
    await eventually('both killed', () => enginesOf([nodeId]).length === 0, 15_000);
  });

  it('shows the node NotReady within heartbeat timeout + 5 s of its agent dying, and Ready again when it returns', async () => {
    const nodeId = uniqueId('presence');
    const first = await startAgent(nodeId);
    await eventually('ready', async () => (await nodeView(nodeId)).phase === 'Ready');
    const killedAt = Date.now();
    await first.proc.kill9();
    await eventually('NotReady', async () => (await nodeView(nodeId)).phase === 'NotReady', 10_000);
    const notReadyAfter = Date.now() - killedAt;
    expect(notReadyAfter).toBeLessThan(10_000);
    console.log(`node NotReady ${notReadyAfter} ms after kill -9 (heartbeat timeout 5 s)`);
    await startAgent(nodeId, { stateDir: first.stateDir });
    await eventually('Ready again', async () => (await nodeView(nodeId)).phase === 'Ready', 15_000);
  });

  it('grants exactly eight of twenty concurrent one-GPU reserves on an 8-GPU node, never one GPU twice, and is idempotent by shard id', async () => {
    const nodeId = uniqueId('reserve');
    await startAgent(nodeId);
    const handle = calls.client().workflow.getHandle(`node/${nodeId}`);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        handle.executeUpdate(reserveUpdate, { args: [{ shardId: `r.${i}.r0.a1`, replicaId: `replica/r/${i}`, count: 1 }] }),
      ),
    );
    const granted = results.filter((result): result is Extract<ReserveResult, { ok: true }> => result.ok);
    expect(granted).toHaveLength(8);
    const indices = granted.flatMap((result) => result.gpuIndices);
    expect(new Set(indices).size).toBe(8);
    const again = await handle.executeUpdate(reserveUpdate, { args: [{ shardId: 'r.0.r0.a1', replicaId: 'replica/r/0', count: 1 }] });
    expect(again).toEqual(results[0]);
    expect((await nodeView(nodeId)).freeGpus).toEqual([]);
  });

  it('on the A100 fixture host, discovered through nvidia-smi, gives a TP2 an NVLink-bridged pair and never hands out GPU 6 (ECC errors)', async () => {
    const nodeId = uniqueId('a100');
    const smiDir = join(__dirname, '../helpers/bin');
    await startAgent(nodeId, {
      gpus: 'real',
      extra: ['--sysfs-root', mkdtempSync(join(tmpdir(), 'no-sysfs-'))],
      env: { PATH: `${smiDir}:${process.env.PATH}`, LLMGW_FAKE_SMI_HOST: 'a100x8-pcie' },
    });
    const view = await nodeView(nodeId);
    expect(view.inventory?.gpus).toHaveLength(8);
    expect(view.inventory?.gpus.find((gpu) => gpu.index === 6)?.problems.join()).toMatch(/uncorrected ECC/);
    const handle = calls.client().workflow.getHandle(`node/${nodeId}`);
    const tp2 = await handle.executeUpdate(reserveUpdate, { args: [{ shardId: 'tp2.1.r0.a1', replicaId: 'replica/tp2/1', count: 2 }] });
    expect(tp2.ok && tp2.gpuIndices).toEqual([0, 1]);
    const handedOut: number[] = [];
    for (let i = 0; i < 8; i++) {
      const result = await handle.executeUpdate(reserveUpdate, {
        args: [{ shardId: `one.${i}.r0.a1`, replicaId: `replica/one/${i}`, count: 1 }],
      });
      if (result.ok) handedOut.push(...result.gpuIndices);
    }
    expect(handedOut.sort()).toEqual([2, 3, 4, 5, 7]);
  });

  it('runs two agents on one machine with the same port range without either touching the other’s engines or handing out the same port', async () => {
    const range = await portRange();
    const a = uniqueId('twin-a');
    const b = uniqueId('twin-b');
    // Agents sharing a host and a range share a claims directory of their own (docs/host-safety.md).
    const claims = ['--port-claims-dir', join(mkdtempSync(join(tmpdir(), 'llmgw-claims-')), 'port-claims')];
    const agentA = await startAgent(a, { range, extra: claims });
    const agentB = await startAgent(b, { range, extra: claims });
    const [shardA, shardB] = await Promise.all([
      call<RunningShard>(a, 'startShard', fakeShardSpec({ nodeId: a, deployment: 'twin-a', gpus: [0], args: ['--load-time', '0'] })),
      call<RunningShard>(b, 'startShard', fakeShardSpec({ nodeId: b, deployment: 'twin-b', gpus: [0], args: ['--load-time', '0'] })),
    ]);
    expect(shardA.status!.httpPort).not.toBe(shardB.status!.httpPort);
    await agentA.proc.kill9();
    const again = await startAgent(a, { stateDir: agentA.stateDir, range, extra: claims });
    expect(again.proc.output()).toMatch(/1 adopted, 0 found exited, 0 unidentified killed/);
    expect(enginesOf([b]).map((engine) => engine.pid)).toEqual([shardB.status!.pid]);
    expect(enginesOf([a]).map((engine) => engine.pid)).toEqual([shardA.status!.pid]);
    void agentB;
  });

  it('rejects bad input clearly: an unknown engine fails startShard without retries; an unwritable state dir and a broken inventory stop the agent with a message', async () => {
    const nodeId = uniqueId('bad');
    await startAgent(nodeId);
    const bad = fakeShardSpec({ nodeId, deployment: 'bad-engine', gpus: [0], engine: Engine.UNSPECIFIED });
    const failure = await call(nodeId, 'startShard', bad).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(WorkflowFailedError);
    const activityFailure = (failure as WorkflowFailedError).cause as ActivityFailure;
    expect(activityFailure).toBeInstanceOf(ActivityFailure);
    const cause = activityFailure.cause as ApplicationFailure;
    expect(cause.type).toBe('InvalidSpec');
    expect(cause.nonRetryable).toBe(true);
    expect(cause.message).toMatch(/engine/);
    expect(enginesOf([nodeId])).toEqual([]);

    const file = join(mkdtempSync(join(tmpdir(), 'llmgw-file-')), 'plain-file');
    writeFileSync(file, 'not a directory');
    const unwritable = spawnLlmgw([
      'agent',
      '--node-id',
      uniqueId('unwritable'),
      '--gpus',
      'builtin:h100x8',
      '--state-dir',
      join(file, 'state'),
      '--admin-addr',
      '127.0.0.1:0',
    ]);
    expect(await unwritable.exited).not.toBe(0);
    expect(unwritable.output()).toMatch(/state dir/i);

    const inventory = join(mkdtempSync(join(tmpdir(), 'llmgw-inv-')), 'broken.yaml');
    writeFileSync(inventory, 'gpus:\n  - index: 0\n    name: H100\n    memoryTotalMib: lots\n');
    const broken = spawnLlmgw(['agent', '--node-id', uniqueId('broken'), '--gpus', inventory, '--admin-addr', '127.0.0.1:0']);
    expect(await broken.exited).not.toBe(0);
    expect(broken.output()).toMatch(/gpus\[0\]\.memoryTotalMib/);
    void readFileSync;
  });
});
