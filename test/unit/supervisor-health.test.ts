// The engine supervisor watching its engines: crashes and failing health reported with the exit
// code and last log lines, and waitHealthy's timeout, cancellation and unknown shards.
import { describe, expect, it } from 'vitest';
import { ShardState } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { isAlive } from '../../agent/supervisor/proc.js';
import { fakeSpec, freeRange, nodeId, supervisor, tempDir, useSupervisorHarness, waitFor } from '../helpers/supervisor.js';
import { rejection } from '../helpers/failures.js';

useSupervisorHarness();

describe('engine failures', () => {
  it('reports a crash as a Failed transition with the exit code and the last log lines', async () => {
    const node = nodeId('crash');
    const { sup, transitions } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    await sup.start(fakeSpec(node, 'demo.3.r0.a1', ['--crash-after', '1']));
    const failed = await waitFor('the crash', () => transitions.find((t) => t.state === ShardState.FAILED));
    expect(failed.exitCode).toBe(3);
    expect(failed.lastLogLines.join('\n')).toContain('--crash-after');
    // Ready first (no load time), then the crash: each once.
    expect(transitions.map((t) => t.state)).toEqual([ShardState.READY, ShardState.FAILED]);
    expect(sup.status('demo.3.r0.a1')?.state).toBe(ShardState.FAILED);
  });

  it('reports an engine whose health fails three times in a row as Failed while its process lives', async () => {
    const node = nodeId('unhealthy');
    const { sup, transitions } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    const pid = (await sup.start(fakeSpec(node, 'demo.11.r0.a1', ['--unhealthy-after', '1']))).status?.pid ?? 0;
    const failed = await waitFor('the unhealthy transition', () => transitions.find((t) => t.state === ShardState.FAILED));
    expect(failed.message).toMatch(/^health check failing: GET http:\/\/127\.0\.0\.1:\d+\/health answered 500/);
    expect(failed.exitCode).toBeUndefined();
    expect(isAlive(pid)).toBe(true);
    await new Promise((r) => setTimeout(r, 600));
    // Polls go on, transitions do not repeat.
    expect(transitions.map((t) => t.state)).toEqual([ShardState.READY, ShardState.FAILED]);
  });

  it('rejects waitHealthy with EngineExited and the engine’s last words when it cannot start', async () => {
    const node = nodeId('failstart');
    const { sup } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    await sup.start(fakeSpec(node, 'demo.4.r0.a1', ['--fail-start']));
    const failure = await rejection(sup.waitHealthy('demo.4.r0.a1', 20));
    expect(failure.type).toBe('EngineExited');
    expect(failure.nonRetryable).toBe(true);
    expect(failure.message).toContain('exited with code 2');
    expect(failure.message).toContain('--fail-start');
    const details = failure.details?.[0] as { exitCode: number; lastLogLines: string[] };
    expect(details.exitCode).toBe(2);
    expect(details.lastLogLines.join('\n')).toContain('failed to load model');
  });
});

describe('waiting for health', () => {
  it('gives up after the startup timeout without killing the engine, and stops waiting when cancelled', async () => {
    const node = nodeId('slow');
    const { sup } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    const pid = (await sup.start(fakeSpec(node, 'demo.12.r0.a1', ['--load-time', '30']))).status?.pid ?? 0;
    const beats: string[] = [];
    const timeout = await rejection(sup.waitHealthy('demo.12.r0.a1', 1, { heartbeat: (d) => beats.push(d.state) }));
    expect(timeout.type).toBe('StartupTimeout');
    expect(timeout.message).toContain('within 1 s (state LOADING');
    expect(isAlive(pid)).toBe(true);

    const cancel = new AbortController();
    const waiting = sup.waitHealthy('demo.12.r0.a1', 30, { signal: cancel.signal });
    cancel.abort(new Error('activity cancelled'));
    await expect(waiting).rejects.toThrow('activity cancelled');

    const unknown = await rejection(sup.waitHealthy('nope', 1));
    expect(unknown.type).toBe('ShardNotFound');
  });
});
