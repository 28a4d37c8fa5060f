// The engine supervisor starting real fake engines: the spec recorded before the spawn, exactly its
// GPUs and markers, idempotent starts, a state dir it cannot write, and ports never shared.
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ShardState } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { scanMarked } from '../../agent/supervisor/processes/markers.js';
import { readEnviron } from '../../agent/supervisor/processes/proc.js';
import { recordPath } from '../../agent/supervisor/spec-store.js';
import { fakeSpec, freeRange, nodeId, servers, supervisor, tempDir, useSupervisorHarness } from '../helpers/supervisor.js';
import { rejection } from '../helpers/failures.js';

useSupervisorHarness();

describe('starting an engine', () => {
  it('records the spec before spawning, gives the engine exactly its GPUs and markers, and is idempotent', async () => {
    const node = nodeId('start');
    const stateDir = tempDir();
    const recordsSeenAtSpawn: unknown[] = [];
    const { sup } = supervisor({
      nodeId: node,
      stateDir,
      portRange: await freeRange(4),
      beforeSpawn: ({ recordFile }) => {
        recordsSeenAtSpawn.push(JSON.parse(readFileSync(recordFile, 'utf8')).processes);
      },
    });
    const spec = fakeSpec(node, 'demo.1.r0.a1', ['--load-time', '1']);

    const startedAt = Date.now();
    const first = await sup.start(spec);
    expect(recordsSeenAtSpawn).toEqual([[]]);
    const pid = first.status?.pid ?? 0;
    expect(pid).toBeGreaterThan(1);
    expect(first.status?.state).toBe(ShardState.LOADING);
    const recorded = JSON.parse(readFileSync(recordPath(stateDir, spec.shardId), 'utf8'));
    expect(recorded.processes).toEqual([{ role: 'engine', pid, startTicks: first.startTicks, pgid: pid }]);

    const env = readEnviron(pid);
    expect(env?.CUDA_VISIBLE_DEVICES).toBe('2,3');
    expect(env?.LLMGW_NODE_ID).toBe(node);
    expect(env?.LLMGW_SHARD_ID).toBe('demo.1.r0.a1');
    expect(env?.LLMGW_REPLICA_ID).toBe('replica/demo/1');

    const ready = await sup.waitHealthy(spec.shardId, 20);
    expect(ready.state).toBe(ShardState.READY);
    expect(ready.endpoint).toBe(`127.0.0.1:${first.status?.httpPort}`);
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(1000);

    const again = await sup.start(spec);
    expect(again.status?.pid).toBe(pid);
    expect(scanMarked(node).map((m) => m.pid)).toEqual([pid]);

    const conflict = await rejection(sup.start(fakeSpec(node, 'demo.1.r0.a1', ['--load-time', '1'], [4])));
    expect(conflict.type).toBe('SpecConflict');
    expect(conflict.message).toContain('gpuIndices');
    expect(scanMarked(node).map((m) => m.pid)).toEqual([pid]);
  });

  it('refuses a state dir it cannot write, clearly, and spawns nothing', async () => {
    const node = nodeId('unwritable');
    const file = join(tempDir(), 'not-a-dir');
    writeFileSync(file, 'x');
    const stateDir = join(file, 'state');
    let spawned = 0;
    const { sup } = supervisor({ nodeId: node, stateDir, portRange: await freeRange(2), beforeSpawn: () => void spawned++ });
    const failure = await rejection(sup.start(fakeSpec(node, 'demo.1.r0.a1', [])));
    expect(failure.type).toBe('StateDirUnwritable');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toContain(stateDir);
    expect(failure.message).toMatch(/ENOTDIR|not a directory/);
    expect(spawned).toBe(0);
    expect(scanMarked(node)).toEqual([]);
  });
});

describe('ports', () => {
  it('never hands one port to two agents, and skips a port another program holds', async () => {
    const range = await freeRange(4);
    const holder = createServer();
    servers.push(holder);
    await new Promise<void>((r) => holder.listen(range.from, '127.0.0.1', () => r()));

    const nodeA = nodeId('ports-a');
    const nodeB = nodeId('ports-b');
    // Two agents of one host share a claims directory of their own (as `llmgw up`'s do).
    const portClaimsDir = join(tempDir(), 'port-claims');
    const a = supervisor({ nodeId: nodeA, stateDir: tempDir(), portRange: range, portClaimsDir });
    const b = supervisor({ nodeId: nodeB, stateDir: tempDir(), portRange: range, portClaimsDir });
    const ra = await a.sup.start(fakeSpec(nodeA, 'demo.5.r0.a1', ['--load-time', '2']));
    // Straight away: A's engine has not bound its port yet.
    const rb = await b.sup.start(fakeSpec(nodeB, 'demo.6.r0.a1', ['--load-time', '2']));
    const ports = [ra.status?.httpPort, rb.status?.httpPort];
    expect(new Set(ports).size).toBe(2);
    expect(ports).not.toContain(range.from);
    expect(a.logs.join('\n')).toContain(`port ${range.from} on 127.0.0.1 is in the agent's engine range but another program holds it`);
    await Promise.all([a.sup.waitHealthy('demo.5.r0.a1', 20), b.sup.waitHealthy('demo.6.r0.a1', 20)]);
  });
});
