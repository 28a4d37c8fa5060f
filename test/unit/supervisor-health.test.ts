// The engine supervisor watching its engines: crashes and failing health reported with the exit
// code and last log lines, and waitHealthy's timeout, cancellation and unknown shards.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { logPath } from '../../agent/supervisor/spec-store.js';
import { ShardState } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { isAlive } from '../../common/proc-stat.js';
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
    expect(failure.message).toContain('`llmgw logs demo/1`');
  });

  it('keeps what a failing engine printed on the host: the failure carries one redacted line and says where the log is', async () => {
    const node = nodeId('leaky');
    const stateDir = tempDir();
    const token = `hf_${'QwErTyUiOpAsDfGhJkLzXcVbNmQwErTyUi'}`;
    process.env.LLMGW_TEST_LEAKY_TOKEN = token;
    try {
      const { sup, transitions } = supervisor({
        nodeId: node,
        stateDir,
        portRange: await freeRange(4),
        passEnv: ['LLMGW_TEST_LEAKY_TOKEN'],
      });
      const spec = fakeSpec(node, 'demo.5.r0.a1', ['--print-env', 'HF_TOKEN', '--fail-start']);
      spec.profile!.envFromHost = { HF_TOKEN: 'LLMGW_TEST_LEAKY_TOKEN' };
      await sup.start(spec);
      const failure = await rejection(sup.waitHealthy('demo.5.r0.a1', 20));
      const failed = await waitFor('the exit', () => transitions.find((t) => t.state === ShardState.FAILED));
      const details = failure.details?.[0] as { lastLogLines: string[] };
      const leaving = JSON.stringify([failure.message, details, failed.lastLogLines, failed.message]);
      expect(leaving).not.toContain(token);
      expect(failed.lastLogLines.length).toBeLessThanOrEqual(1);
      expect(details.lastLogLines.length).toBeLessThanOrEqual(1);
      expect(failure.message).toMatch(/the engine's log stays on node leaky-\S+: `llmgw logs demo\/1`/);
      // The log on the host has it all.
      expect(readFileSync(logPath(stateDir, 'demo.5.r0.a1'), 'utf8')).toContain(`HF_TOKEN=${token}`);
    } finally {
      delete process.env.LLMGW_TEST_LEAKY_TOKEN;
    }
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
