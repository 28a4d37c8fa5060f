// Who is woken when GPUs are freed, and which node a replica is offered first: the pure rules
// behind event-driven waiting (activities/capacity.ts) and index-based placement.
import { describe, expect, it } from 'vitest';
import { chooseWaitersToWake } from '../../activities/capacity.js';
import { rankCandidates } from '../../activities/placement-index.js';
import { bundleHash } from '../../workers/versioning.js';

const waiter = (replicaId: string, gpusPerNode: number, since: string, nodes = 1) => ({
  replicaId,
  demand: { gpuClass: 'H100', gpusPerNode, nodes, since },
});

describe('waking waiting replicas', () => {
  it('wakes the oldest waiters that fit the freed GPUs, not everyone', () => {
    const woken = chooseWaitersToWake(
      [waiter('r/c', 2, '2026-01-01T00:00:03Z'), waiter('r/a', 4, '2026-01-01T00:00:01Z'), waiter('r/b', 4, '2026-01-01T00:00:02Z')],
      6,
    );
    expect(woken).toEqual(['r/a', 'r/c']);
  });

  it('always wakes a gang: any freed host may be the one it lacked', () => {
    expect(chooseWaitersToWake([waiter('r/gang', 8, '2026-01-01T00:00:01Z', 2), waiter('r/one', 1, '2026-01-01T00:00:02Z')], 1)).toEqual([
      'r/gang',
      'r/one',
    ]);
  });

  it('wakes nobody when nothing fits', () => {
    expect(chooseWaitersToWake([waiter('r/a', 4, '2026-01-01T00:00:01Z')], 2)).toEqual([]);
  });

  it('wakes a waiter able to sleep for a GPU only sleepers hold, where its share fits, and no other', () => {
    const sharer = (replicaId: string, since: string, awakeShare: number) => ({
      replicaId,
      demand: { gpuClass: 'H100', gpusPerNode: 1, nodes: 1, since, awakeShare },
    });
    // No empty GPU; one GPU with nothing awake, one with 0.5 awake.
    const woken = chooseWaitersToWake(
      [
        waiter('r/plain', 1, '2026-01-01T00:00:01Z'),
        sharer('r/big', '2026-01-01T00:00:02Z', 0.9),
        sharer('r/small', '2026-01-01T00:00:03Z', 0.5),
        sharer('r/late', '2026-01-01T00:00:04Z', 0.9),
      ],
      0,
      [0, 0.5],
    );
    expect(woken).toEqual(['r/big', 'r/small']);
  });
});

describe('ranking placement candidates from the capacity index', () => {
  const node = (nodeId: string, free: number, siblings = 0) => ({ nodeId, state: 'Ready', free, siblings });

  it('offers the node that woke the replica first, then spreads, then packs', () => {
    const ranked = rankCandidates([node('a', 8), node('b', 2), node('c', 4, 1), node('d', 8)], {
      replicaId: 'replica/x/1',
      preferNodes: ['d'],
    });
    expect(ranked.map((n) => n.nodeId)).toEqual(['d', 'b', 'a', 'c']);
  });

  it('sends replicas placed at the same moment to different nodes', () => {
    const nodes = [node('a', 8), node('b', 8), node('c', 8)];
    const firsts = [1, 2, 3].map((seq) => rankCandidates(nodes, { replicaId: `replica/x/${seq}` })[0]!.nodeId);
    expect(new Set(firsts).size).toBe(3);
  });
});

describe('build ids', () => {
  it('hash the bundle by module, whatever order the modules come in', () => {
    const one = '/***/ "./a.js"\nA\n/***/ "./b.js"\nB\n/******/ tail';
    const two = '/***/ "./b.js"\nB\n/***/ "./a.js"\nA\n/******/ other tail';
    expect(bundleHash(one)).toBe(bundleHash(two));
    expect(bundleHash(one)).not.toBe(bundleHash(one.replace('A', 'A2')));
  });
});
