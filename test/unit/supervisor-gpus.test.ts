// The engine supervisor and processes on its GPUs that it did not start: reported and left running,
// killed only with --foreign-gpu-processes kill, another agent's engines never, nothing in dry-run.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { isAlive } from '../../common/proc-stat.js';
import { readEnviron } from '../../agent/supervisor/processes/proc.js';
import { agentHost, extraPids, fakeSpec, nodeId, useSupervisorHarness, waitFor } from '../helpers/supervisor.js';

useSupervisorHarness();

describe('processes on our GPUs', () => {
  const sleeper = (env: Record<string, string>) => {
    const child = spawn('sleep', ['30'], { detached: true, stdio: 'ignore', env: { PATH: process.env.PATH ?? '', ...env } });
    child.unref();
    if (child.pid === undefined) throw new Error('spawn failed');
    extraPids.push(child.pid);
    return child.pid;
  };
  /** A sleeper nobody marked and one carrying the given markers, both running once this returns. */
  const strayAndMarked = async (markers: Record<string, string>) => {
    const stray = sleeper({});
    const marked = sleeper(markers);
    await waitFor('the sleepers', () => (readEnviron(stray) && readEnviron(marked) ? true : undefined));
    return { stray, marked };
  };
  const onGpu1 = (pids: number[]) => pids.map((pid) => ({ pid, gpuIndices: [1], usedMemoryMib: 512 }));

  it('reports a GPU process it did not start and leaves it running, by default; never kills another agent’s or our own', async () => {
    const { node, startAgent } = await agentHost('gpus');
    const other = nodeId('gpus-other');
    const { stray, marked: theirs } = await strayAndMarked({ LLMGW_NODE_ID: other, LLMGW_SHARD_ID: 'x' });
    const { sup, logs } = startAgent();
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
    const { startAgent } = await agentHost('gpus-kill');
    const other = nodeId('gpus-kill-other');
    const { stray, marked: theirs } = await strayAndMarked({ LLMGW_NODE_ID: other, LLMGW_SHARD_ID: 'x' });
    const { sup, logs } = startAgent({ foreignGpuProcesses: 'kill' });
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
    const { node, startAgent } = await agentHost('gpus-dry');
    const { stray, marked: ghost } = await strayAndMarked({ LLMGW_NODE_ID: node, LLMGW_SHARD_ID: 'ghost' });
    const { sup, logs } = startAgent({ dryRun: true, foreignGpuProcesses: 'kill' });
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
