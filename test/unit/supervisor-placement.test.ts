// The engine supervisor checks a start's placement before it writes or spawns anything: GPUs it
// does not manage, GPUs another live shard holds, and ports outside its range (or privileged)
// are refused non-retryably, naming why, with no spec written and no process started.
import { existsSync } from 'node:fs';
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { StopShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { scanMarked } from '../../agent/supervisor/processes/markers.js';
import { recordPath } from '../../agent/supervisor/spec-store.js';
import { rejection } from '../helpers/failures.js';
import { fakeSpec, freeRange, nodeId, supervisor, tempDir, useSupervisorHarness } from '../helpers/supervisor.js';

useSupervisorHarness();

describe('what the agent is asked to start', () => {
  it('refuses GPUs it does not manage, naming them, and starts nothing', async () => {
    const node = nodeId('unmanaged');
    const stateDir = tempDir();
    const { sup, logs } = supervisor({ nodeId: node, stateDir, portRange: await freeRange(4), managedGpus: [0, 1, 2, 3] });
    const failure = await rejection(sup.start(fakeSpec(node, 'demo.20.r0.a1', [], [3, 6])));
    expect(failure.type).toBe('PlacementRefused');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toMatch(
      /refused shard demo\.20\.r0\.a1 of replica\/demo\/1: GPU 6 is not managed by this agent \(it manages 0,1,2,3\)/,
    );
    expect(existsSync(recordPath(stateDir, 'demo.20.r0.a1'))).toBe(false);
    expect(scanMarked(node)).toEqual([]);
    expect(logs.join('\n')).toContain('refused shard demo.20.r0.a1');
  });

  it('refuses GPUs another running shard holds until that shard is stopped', async () => {
    const node = nodeId('held');
    const { sup } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4), managedGpus: [0, 1, 2, 3, 4, 5, 6, 7] });
    const first = await sup.start(fakeSpec(node, 'demo.21.r0.a1', [], [2, 3]));
    const failure = await rejection(sup.start(fakeSpec(node, 'demo.22.r0.a1', [], [3, 4])));
    expect(failure.type).toBe('PlacementRefused');
    expect(failure.message).toContain('GPU 3 is held by shard demo.21.r0.a1, which is still running');
    expect(scanMarked(node).map((m) => m.pid)).toEqual([first.status?.pid]);
    await sup.stop(create(StopShardSchema, { shardId: 'demo.21.r0.a1', reason: 'test' }));
    expect((await sup.start(fakeSpec(node, 'demo.22.r0.a1', [], [3, 4]))).status?.pid).toBeGreaterThan(0);
  });

  it('gives the GPUs to exactly one of two starts that ask for them at once', async () => {
    const node = nodeId('race');
    const { sup } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4), managedGpus: [0, 1] });
    const results = await Promise.allSettled([
      sup.start(fakeSpec(node, 'demo.23.r0.a1', [], [0, 1])),
      sup.start(fakeSpec(node, 'demo.24.r0.a1', [], [1])),
    ]);
    expect(results.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
    expect(scanMarked(node)).toHaveLength(1);
  });

  it('refuses a port outside its range, and a privileged one, but takes a port inside its range', async () => {
    const node = nodeId('ports');
    const stateDir = tempDir();
    const range = await freeRange(4);
    const { sup } = supervisor({ nodeId: node, stateDir, portRange: range });
    for (const [port, why] of [
      [22, 'httpPort 22 is a privileged port'],
      [range.to + 1, `httpPort ${range.to + 1} is outside this agent's --port-range ${range.from}-${range.to}`],
    ] as const) {
      const spec = fakeSpec(node, `demo.2${port === 22 ? 5 : 6}.r0.a1`, []);
      spec.httpPort = port;
      const failure = await rejection(sup.start(spec));
      expect(failure.type).toBe('PlacementRefused');
      expect(failure.message).toContain(why);
      expect(existsSync(recordPath(stateDir, spec.shardId))).toBe(false);
    }
    expect(scanMarked(node)).toEqual([]);
    const inside = fakeSpec(node, 'demo.27.r0.a1', []);
    inside.httpPort = range.to;
    expect((await sup.start(inside)).status?.httpPort).toBe(range.to);
  });
});
