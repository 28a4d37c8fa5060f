// The engine supervisor and processes on its GPUs that it did not start: reported and left running,
// killed only with --foreign-gpu-processes kill, another agent's engines never, nothing in dry-run.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { isAlive, readEnviron } from '../../agent/supervisor/proc.js';
import { extraPids, fakeSpec, freeRange, nodeId, supervisor, tempDir, useSupervisorHarness, waitFor } from '../helpers/supervisor.js';

useSupervisorHarness();

describe('processes on our GPUs', () => {
  const sleeper = (env: Record<string, string>) => {
    const child = spawn('sleep', ['30'], { detached: true, stdio: 'ignore', env: { PATH: process.env.PATH ?? '', ...env } });
    child.unref();
    if (child.pid === undefined) throw new Error('spawn failed');
    extraPids.push(child.pid);
    return child.pid;
  };
  const onGpu1 = (pids: number[]) => pids.map((pid) => ({ pid, gpuIndices: [1], usedMemoryMib: 512 }));

  it('reports a GPU process it did not start and leaves it running, by default; never kills another agent’s or our own', async () => {
    const node = nodeId('gpus');
    const other = nodeId('gpus-other');
    const stray = sleeper({});
    const theirs = sleeper({ LLMGW_NODE_ID: other, LLMGW_SHARD_ID: 'x' });
    await waitFor('the sleepers', () => (readEnviron(stray) && readEnviron(theirs) ? true : undefined));
    const { sup, logs } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4) });
    const started = await sup.start(fakeSpec(node, 'demo.13.r0.a1', []));
    const ours = started.status?.pid ?? 0;

    const found = await sup.survey(onGpu1([ours, stray, theirs]));
    expect(found.unidentified).toEqual([]);
    expect(found.foreign.map((f) => [f.pid, f.killed, f.command, f.gpuIndices, f.usedMemoryMib])).toEqual([
      [stray, false, 'sleep 30', [1], 512],
      [theirs, false, 'sleep 30', [1], 512],
    ]);
    expect(found.foreign[0]?.note).toMatch(/not started by llmgw: reported and left running; GPU 1 withheld from placement/);
    expect(found.foreign[1]?.note).toMatch(new RegExp(`an engine of llmgw agent ${other}: left alone`));
    expect([isAlive(stray), isAlive(theirs), isAlive(ours)]).toEqual([true, true, true]);
    expect(logs).toContainEqual(expect.stringContaining(`foreign process pid ${stray} (sleep 30) on GPU(s) 1, 512 MiB`));
    expect(sup.foreignProcesses(onGpu1([stray])).map((f) => f.pid)).toEqual([stray]);
    // Reconciliation cannot make it kill them either: they carry no marker of ours.
    const refused = await sup.kill([ours, theirs, stray], 'test');
    expect(refused).toMatchObject({ refused: [ours, theirs, stray], killed: [] });
  });

  it('kills a foreign GPU process with --foreign-gpu-processes kill, naming it, but never one of another agent', async () => {
    const node = nodeId('gpus-kill');
    const other = nodeId('gpus-kill-other');
    const stray = sleeper({});
    const theirs = sleeper({ LLMGW_NODE_ID: other, LLMGW_SHARD_ID: 'x' });
    await waitFor('the sleepers', () => (readEnviron(stray) && readEnviron(theirs) ? true : undefined));
    const { sup, logs } = supervisor({ nodeId: node, stateDir: tempDir(), portRange: await freeRange(4), foreignGpuProcesses: 'kill' });
    const { foreign } = await sup.recover(onGpu1([stray, theirs]));
    expect(foreign.map((f) => [f.pid, f.killed])).toEqual([
      [stray, true],
      [theirs, false],
    ]);
    expect(isAlive(stray)).toBe(false);
    expect(isAlive(theirs)).toBe(true);
    expect(logs).toContainEqual(expect.stringContaining(`killed foreign process pid ${stray} (sleep 30) on GPU(s) 1`));
  });

  it('kills nothing at all in dry-run, at start or later, and says what act mode would do', async () => {
    const node = nodeId('gpus-dry');
    const stateDir = tempDir();
    const portRange = await freeRange(4);
    const stray = sleeper({});
    const ghost = sleeper({ LLMGW_NODE_ID: node, LLMGW_SHARD_ID: 'ghost' });
    await waitFor('the sleepers', () => (readEnviron(stray) && readEnviron(ghost) ? true : undefined));
    const { sup, logs } = supervisor({ nodeId: node, stateDir, portRange, dryRun: true, foreignGpuProcesses: 'kill' });
    const recovered = await sup.recover(onGpu1([stray]));
    expect(recovered.unidentified.map((u) => [u.pid, u.killed, u.reason])).toEqual([
      [ghost, false, 'no spec describes it (dry run: act mode would kill it)'],
    ]);
    expect(recovered.foreign.map((f) => [f.pid, f.killed])).toEqual([[stray, false]]);
    expect(recovered.foreign[0]?.note).toMatch(/dry run: act mode would kill it/);
    const later = await sup.survey(onGpu1([stray]));
    expect(later.unidentified.map((u) => u.killed)).toEqual([false]);
    expect(await sup.kill([ghost, stray], 'reconciliation')).toMatchObject({ killed: [], refused: [ghost, stray] });
    expect([isAlive(stray), isAlive(ghost)]).toEqual([true, true]);
    expect(logs).toContainEqual(expect.stringContaining(`dry run: would kill pid ${ghost} (LLMGW_SHARD_ID=ghost): no spec describes it`));
  });
});
