// The fake engine's life: /health 503 while loading, multi-node membership (unhealthy until its
// worker joins, a worker told when its leader goes), and the injected faults (failed start, crash,
// unhealthy, hang).
import { describe, expect, it } from 'vitest';
import { runFakeEngine, type FakeEngineProcess } from '../../fake-engine/main.js';
import { waitFor } from '../helpers/poll.js';
import { base, health, start, useFakeEngineHarness } from '../helpers/fake-engine-harness.js';

useFakeEngineHarness();

describe('fake engine: loading and health', () => {
  it('answers /health 503 and refuses inference until the load time has passed, then 200', async () => {
    const started = Date.now();
    // Long enough that a busy machine still asks while the engine loads.
    const engine = await start({ loadTimeS: 3 });
    expect(await health(engine)).toBe(503);
    const refused = await fetch(`${base(engine)}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(refused.status).toBe(503);
    expect(await refused.json()).toMatchObject({ object: 'error', code: 503 });
    await waitFor(async () => (await health(engine)) === 200, 15_000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(2_900);
    expect(await (await fetch(`${base(engine)}/health`)).text()).toBe('');
  });
});

describe('fake engine: multi-node', () => {
  it('is unhealthy until its worker joins, and for good once the worker leaves', async () => {
    const leader = await start({ nnodes: 2, leader: { host: '127.0.0.1', port: 0 } });
    expect(await health(leader)).toBe(503);
    const lost: string[] = [];
    const worker = await start(
      { nnodes: 2, nodeRank: 1, port: undefined, leader: { host: '127.0.0.1', port: leader.rendezvousPort as number } },
      { onLeaderLost: (reason: string) => lost.push(reason) },
    );
    expect(worker.port).toBe(0);
    await waitFor(async () => (await health(leader)) === 200);
    expect(worker.state()).toBe('ready');

    await worker.close(0);
    await waitFor(async () => (await health(leader)) === 503);
    expect(leader.state()).toBe('group-broken');
    expect(lost).toEqual([]);
  });

  it('tells a worker its leader is gone when the leader stops', async () => {
    const leader = await start({ nnodes: 2, leader: { host: '127.0.0.1', port: 0 } });
    const lost: string[] = [];
    const worker = await start(
      { nnodes: 2, nodeRank: 1, port: 0, leader: { host: '127.0.0.1', port: leader.rendezvousPort as number } },
      { onLeaderLost: (reason: string) => lost.push(reason) },
    );
    await waitFor(async () => (await health(worker)) === 200);
    await leader.close(0);
    await waitFor(() => lost.length === 1);
    expect(lost[0]).toContain('lost the leader');
  });
});

describe('fake engine: injected faults in the process', () => {
  function recordingProcess() {
    const out: string[] = [];
    const err: string[] = [];
    const exits: number[] = [];
    const signals = new Map<string, () => void>();
    const proc: FakeEngineProcess = {
      stdout: (l) => out.push(l),
      stderr: (l) => err.push(l),
      exit: (code) => exits.push(code),
      env: { CUDA_VISIBLE_DEVICES: '2,3' },
      onSignal: (s, h) => signals.set(s, h),
    };
    return { proc, out, err, exits, signals };
  }

  it('fails to start with exit code 2 and a line on stderr (--fail-start)', async () => {
    const p = recordingProcess();
    await runFakeEngine(['--port', '0', '--fail-start'], p.proc);
    expect(p.exits).toEqual([2]);
    expect(p.err.join('\n')).toMatch(/failed to load/);
    expect(p.out.join('\n')).toContain('CUDA_VISIBLE_DEVICES=2,3');
  });

  it('exits with code 3 after --crash-after, and 0 after SIGTERM', async () => {
    const p = recordingProcess();
    await runFakeEngine(['--port', '0', '--crash-after', '0.1'], p.proc);
    expect(p.out.join('\n')).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+/);
    await waitFor(() => p.exits.length > 0);
    expect(p.exits).toEqual([3]);
    expect(p.err.join('\n')).toMatch(/crash/);
    p.signals.get('SIGTERM')?.();
    await waitFor(() => p.exits.length > 1);
    expect(p.exits).toEqual([3, 0]);
  });

  it('fails /health with 500 after --unhealthy-after and never answers inference with --hang', async () => {
    const engine = await start({ unhealthyAfterS: 0.1, hang: true });
    expect(await health(engine)).toBe(200);
    await waitFor(async () => (await health(engine)) === 500);
    const hung = fetch(`${base(engine)}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'hi' }),
      signal: AbortSignal.timeout(300),
    });
    await expect(hung).rejects.toThrow();
  });
});
