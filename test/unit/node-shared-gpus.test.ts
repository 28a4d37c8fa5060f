// Guards GPUs shared by sleepers (docs/sleep.md, "Sharing GPUs"): the awake share an engine takes,
// which GPUs the node hands a sharing shard, the wake permits it grants (the least recently woken
// holder named first), allocations restored asleep from a report, placement's index reading
// room for a sharer, and the audit of a node's history. Above all: no sequence of these ever puts more than one GPU's worth awake.
import { create } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { GPUSchema } from '../../proto/gen/llmgw/v1/gpu_pb.js';
import { RegisterSchema } from '../../proto/gen/llmgw/v1/register_pb.js';
import { Engine, EngineProfileSchema, RunningShardSchema, ShardState, StartShardSchema } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { awakeLoad, awakeShareOf, roomFor, startedAbleToSleep } from '../../common/placement/shared-gpus.js';
import { auditAwake } from '../../common/placement/awake-audit.js';
import { rankCandidates } from '../../activities/placement-index.js';
import {
  applyRegister,
  initialNodeState,
  reconcileAllocations,
  release,
  reserve,
  viewOf,
  type NodeState,
} from '../../workflows/node/state.js';
import { setAwake } from '../../workflows/node/shared-gpus.js';

const T = (s: number): string => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();

/** A registered, enrolled node with `gpus` simulated GPUs of 1000 MiB. */
function node(gpus: number): NodeState {
  const state = initialNodeState('n1');
  applyRegister(
    state,
    create(RegisterSchema, {
      nodeId: 'n1',
      managementAddress: '127.0.0.1',
      gpuClass: 'SIM',
      gpus: Array.from({ length: gpus }, (_, index) =>
        create(GPUSchema, { index, uuid: `GPU-${index}`, memoryTotalMib: 1000, numaNode: 0 }),
      ),
      managedGpus: Array.from({ length: gpus }, (_, index) => index),
    }),
    T(0),
  );
  state.enrolled = true;
  return state;
}

const take = (state: NodeState, id: string, awakeShare?: number, at = T(1)) =>
  reserve(state, { shardId: `${id}.r0`, replicaId: `replica/${id}/1`, count: 1, ...(awakeShare !== undefined ? { awakeShare } : {}) }, at);

/** The invariant: on every GPU, the awake shares (1 for a holder that does not share) add up to at most 1. */
function maxLoad(state: NodeState): number {
  return Math.max(0, ...state.inventory!.gpus.map((gpu) => awakeLoad(state.allocations, gpu.index)));
}

describe('the awake share of an engine able to sleep', () => {
  it('is its --gpu-memory-utilization, else 0.9 for vllm and fake, and 1 for llama.cpp', () => {
    expect(awakeShareOf('vllm', ['--gpu-memory-utilization', '0.45'])).toBe(0.45);
    expect(awakeShareOf('fake', ['--gpu-memory-utilization=0.3'])).toBe(0.3);
    expect(awakeShareOf('fake', [])).toBe(0.9);
    expect(awakeShareOf('vllm', ['--gpu-memory-utilization', '7'])).toBe(0.9);
    expect(awakeShareOf('llamacpp', ['--gpu-memory-utilization', '0.2'])).toBe(1);
    expect(awakeShareOf(Engine.FAKE, ['--gpu-memory-utilization', '0.5'])).toBe(0.5);
  });

  it('belongs to engines started with the sleep flags only', () => {
    expect(startedAbleToSleep('fake', ['--enable-sleep-mode'])).toBe(true);
    expect(startedAbleToSleep(Engine.LLAMACPP, ['--sleep-idle-seconds', '60'])).toBe(true);
    expect(startedAbleToSleep('vllm', [])).toBe(false);
    expect(startedAbleToSleep('sglang', ['--enable-sleep-mode'])).toBe(false);
  });
});

describe('placing a sharing shard on a node', () => {
  it('takes an empty GPU before a sleeper\u2019s, and a sleeper\u2019s GPU only where its share fits', () => {
    const state = node(2);
    expect(take(state, 'a', 0.9)).toMatchObject({ ok: true, gpuIndices: [0] });
    // GPU 1 is empty: b goes there although a's GPU would fit once a sleeps.
    setAwake(state, { shardId: 'a.r0', awake: false }, T(2));
    expect(take(state, 'b', 0.9)).toMatchObject({ ok: true, gpuIndices: [1] });
    // Both GPUs full awake or taken: c shares a's, which sleeps.
    expect(take(state, 'c', 0.9)).toMatchObject({ ok: true, gpuIndices: [0] });
    // Now GPU 0 has c awake (0.9) and GPU 1 b awake (0.9): nothing fits.
    expect(take(state, 'd', 0.9)).toMatchObject({ ok: false });
    // A small one fits beside c.
    expect(take(state, 'e', 0.1)).toMatchObject({ ok: true, gpuIndices: [0] });
    expect(maxLoad(state)).toBeLessThanOrEqual(1);
  });

  it('never gives a sleeper\u2019s GPU to a shard that does not share, nor shares one that a non-sharer holds', () => {
    const state = node(1);
    take(state, 'a', 0.5);
    setAwake(state, { shardId: 'a.r0', awake: false }, T(2));
    expect(take(state, 'plain')).toMatchObject({ ok: false });
    release(state, 'a.r0');
    expect(take(state, 'plain')).toMatchObject({ ok: true, gpuIndices: [0] });
    expect(take(state, 'b', 0.1)).toMatchObject({ ok: false });
  });

  it('shows placement the room a sharer has: empty GPUs, and sleepers\u2019 GPUs where it fits', () => {
    const state = node(2);
    take(state, 'a', 0.9);
    expect(viewOf(state).sharedGpus).toEqual([0.9]);
    setAwake(state, { shardId: 'a.r0', awake: false }, T(2));
    const view = viewOf(state);
    expect(view.sharedGpus).toEqual([0]);
    expect(roomFor(view.freeGpus.length, view.sharedGpus, 0.9)).toBe(2);
    expect(roomFor(view.freeGpus.length, view.sharedGpus, undefined)).toBe(1);
    expect(roomFor(0, [0.9], 0.2)).toBe(0);
  });

  it('ranks a node with empty GPUs before one where it would share with sleepers', () => {
    const ranked = rankCandidates(
      [
        { nodeId: 'a', state: 'Ready', free: 1, empty: 0, siblings: 0 },
        { nodeId: 'b', state: 'Ready', free: 2, empty: 2, siblings: 0 },
      ],
      { replicaId: 'replica/x/1' },
      1,
    );
    expect(ranked.map((n) => n.nodeId)).toEqual(['b', 'a']);
  });
});

describe('wake permits', () => {
  it('refuses a wake that does not fit and names the awake holders, least recently woken first', () => {
    const state = node(1);
    take(state, 'a', 0.4, T(1));
    setAwake(state, { shardId: 'a.r0', awake: false }, T(2));
    take(state, 'b', 0.4, T(3));
    take(state, 'c', 0.4, T(2));
    const refused = setAwake(state, { shardId: 'a.r0', awake: true }, T(4));
    expect(refused).toMatchObject({ ok: false });
    expect(refused.ok ? [] : refused.holders.map((h) => h.replicaId)).toEqual(['replica/c/1', 'replica/b/1']);
    expect(state.allocations.find((a) => a.shardId === 'a.r0')!.asleep).toBe(true);
    // c sleeps: a fits (0.4 + 0.4).
    setAwake(state, { shardId: 'c.r0', awake: false }, T(5));
    expect(setAwake(state, { shardId: 'a.r0', awake: true }, T(6))).toEqual({ ok: true });
    expect(state.allocations.find((a) => a.shardId === 'a.r0')).toMatchObject({ asleep: false, awakeSince: T(6) });
    // Asked again, the same answer and nothing changed.
    expect(setAwake(state, { shardId: 'a.r0', awake: true }, T(7))).toEqual({ ok: true });
    expect(state.allocations.find((a) => a.shardId === 'a.r0')!.awakeSince).toBe(T(6));
    expect(maxLoad(state)).toBeCloseTo(0.8);
  });

  it('grants a shard that does not share at once, and refuses one the node does not hold', () => {
    const state = node(1);
    take(state, 'plain');
    expect(setAwake(state, { shardId: 'plain.r0', awake: true }, T(2))).toEqual({ ok: true });
    expect(setAwake(state, { shardId: 'ghost.r0', awake: true }, T(2))).toMatchObject({ ok: false, holders: [] });
  });

  it('keeps every GPU at most full through any order of reserves, sleeps and wakes', () => {
    let seed = 7;
    const random = (n: number): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    const state = node(2);
    const shares = [0.9, 0.5, 0.4, 0.3, 0.6, 0.2];
    for (let step = 0; step < 2000; step++) {
      const i = random(shares.length);
      const id = `m${i}`;
      const held = state.allocations.some((a) => a.shardId === `${id}.r0`);
      const op = random(4);
      if (!held && op === 0) take(state, id, shares[i], T(step));
      else if (held && op === 1) setAwake(state, { shardId: `${id}.r0`, awake: false }, T(step));
      else if (held && op === 2) setAwake(state, { shardId: `${id}.r0`, awake: true }, T(step));
      else if (held && op === 3 && random(5) === 0) release(state, `${id}.r0`);
      expect(maxLoad(state)).toBeLessThanOrEqual(1 + 1e-9);
    }
  });
});

describe('allocations restored from a report', () => {
  it('restore sharing engines beside each other, asleep as their engines said', () => {
    const state = node(1);
    const running = (id: string, sleeping: boolean | undefined, args: string[]) =>
      create(RunningShardSchema, {
        spec: create(StartShardSchema, {
          shardId: `${id}.r0`,
          replicaId: `replica/${id}/1`,
          gpuIndices: [0],
          profile: create(EngineProfileSchema, { engine: Engine.FAKE, args }),
        }),
        status: { state: ShardState.READY },
        ...(sleeping !== undefined ? { sleeping } : {}),
      });
    const register = create(RegisterSchema, {
      nodeId: 'n1',
      managementAddress: '127.0.0.1',
      gpuClass: 'SIM',
      gpus: [create(GPUSchema, { index: 0, memoryTotalMib: 1000 })],
      managedGpus: [0],
      runningShards: [
        running('a', true, ['--enable-sleep-mode']),
        running('b', false, ['--enable-sleep-mode', '--gpu-memory-utilization', '0.6']),
        running('plain', undefined, []),
      ],
    });
    const notes = applyRegister(state, register, T(9));
    expect(state.allocations.map((a) => [a.shardId, a.awakeShare, a.asleep])).toEqual([
      ['a.r0', 0.9, true],
      ['b.r0', 0.6, false],
    ]);
    expect(notes.join('\n')).toMatch(/plain\.r0 runs on GPUs 0 that are allocated to another shard/);
  });
});

describe('the audit of a node history', () => {
  it('replays reserve, awake and release Updates and names a moment with too much awake', () => {
    const reserved = (shardId: string, awakeShare: number) => ({
      name: 'reserve',
      request: { shardId, replicaId: `replica/${shardId}/1`, count: 1, awakeShare },
      result: { ok: true, gpuIndices: [0] },
    });
    const awake = (shardId: string, on: boolean) => ({ name: 'awake', request: { shardId, awake: on }, result: { ok: true } });
    const clean = auditAwake([reserved('a', 0.9), awake('a', false), reserved('b', 0.9), awake('b', false), awake('a', true)]);
    expect(clean).toEqual({ violations: [], maxLoad: 0.9, moments: 5 });
    const bad = auditAwake([reserved('a', 0.9), reserved('b', 0.9)]);
    expect(bad.violations).toEqual([expect.stringMatching(/after reserve of b .*GPU 0 holds 1\.8 awake \(a, b\)/)]);
    // A refused permit changes nothing; a release frees.
    const refused = auditAwake([
      reserved('a', 0.9),
      awake('a', false),
      reserved('b', 0.9),
      { name: 'awake', request: { shardId: 'a', awake: true }, result: { ok: false, holders: [] } },
      { name: 'release', request: { shardId: 'b' }, result: true },
      awake('a', true),
    ]);
    expect(refused.violations).toEqual([]);
  });
});

describe('reconciliation', () => {
  it('claims an engine able to sleep beside a sharer, but not beside one that holds its GPU alone', () => {
    const state = node(1);
    take(state, 'a', 0.9);
    setAwake(state, { shardId: 'a.r0', awake: false }, T(2));
    const claim = { shardId: 'b.r0', replicaId: 'replica/b/1', gpuIndices: [0], hcas: [], since: T(3), via: 'claim' as const };
    const shared = reconcileAllocations(state, { claims: [{ ...claim, awakeShare: 0.9, asleep: false }], releases: [] }, T(3));
    expect(shared).toMatchObject({ claimed: ['b.r0'], conflicts: [] });
    expect(state.allocations.map((x) => x.shardId)).toEqual(['a.r0', 'b.r0']);

    const alone = node(1);
    take(alone, 'plain');
    const refused = reconcileAllocations(alone, { claims: [{ ...claim, awakeShare: 0.9, asleep: false }], releases: [] }, T(3));
    // The engine that runs wins over a reservation nothing runs on, as for any claim.
    expect(refused.conflicts).toEqual([expect.stringMatching(/reserved for plain\.r0.*the reservation was dropped/)]);
  });
});
