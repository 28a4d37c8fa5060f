// Placed near: among hosts that fit, placement prefers one whose weights cache already holds
// the revision, without giving up spreading; hosts report what they hold (the agent's report,
// the node's memo and view). Pure rules of activities/placement.ts, choose-hosts.ts,
// agent/weights/weights-report.ts and the node's state.
import { describe, expect, it } from 'vitest';
import { rankCandidates } from '../../activities/placement-index.js';
import { gangHostFromView, rankGangFabrics } from '../../common/placement/choose-hosts.js';
import { heldKeyOfSource, sourceOfHeld } from '../../common/held-weights.js';
import type { HeldWeights, NodeView } from '../../common/node-types.js';
import { heldWeightsOf } from '../../agent/weights/weights-report.js';
import { heldWeightKeys, initialNodeState, viewOf } from '../../workflows/node/state.js';
import { create } from '@bufbuild/protobuf';
import { RunningShardSchema, ShardState } from '../../proto/gen/llmgw/v1/shard_pb.js';

const COMMIT = 'a'.repeat(40);
const node = (nodeId: string, free: number, siblings = 0, holds = false) => ({ nodeId, state: 'Ready', free, siblings, holds });

describe('placing near the weights', () => {
  it('prefers a host that holds the revision over one that packs tighter', () => {
    const ranked = rankCandidates([node('a', 2), node('b', 8, 0, true), node('c', 4)], { replicaId: 'replica/x/1' });
    expect(ranked.map((n) => n.nodeId)).toEqual(['b', 'a', 'c']);
  });

  it('still spreads first: a holder that already runs a sibling comes after an empty host', () => {
    const ranked = rankCandidates([node('a', 8, 1, true), node('b', 8, 0, false), node('c', 8, 0, true)], { replicaId: 'replica/x/1' });
    expect(ranked.map((n) => n.nodeId)).toEqual(['c', 'b', 'a']);
  });

  it('keeps the node that woke the replica first', () => {
    const ranked = rankCandidates([node('a', 8, 0, true), node('b', 8)], { replicaId: 'replica/x/1', preferNodes: ['b'] });
    expect(ranked[0]!.nodeId).toBe('b');
  });

  it('ranks gang hosts of one fabric by holding the weights after rate, HCAs and spread', () => {
    const view = (nodeId: string, weights: HeldWeights[]): NodeView => ({
      nodeId,
      phase: 'Ready',
      cordoned: false,
      reason: '',
      inventory: {
        nodeId,
        hostname: nodeId,
        managementAddress: '127.0.0.1',
        adminAddress: '',
        labels: {},
        gpuClass: 'H100',
        gpus: [],
        managedGpus: [],
        fabrics: [{ fabric: 'ib-a', hcas: ['mlx5_0'], rateGbps: 400 }],
        problems: [],
        agentVersion: '',
        gpuSource: '',
        reportedAt: '',
      },
      allocations: [],
      freeGpus: [0, 1, 2, 3, 4, 5, 6, 7],
      lastRegisteredAt: undefined,
      notReadySince: undefined,
      registrations: 1,
      weights,
    });
    const held: HeldWeights = { source: `hf://o/m@${COMMIT}`, repo: 'o/m', commit: COMMIT, bytes: 1, lastUsedAt: '', inUseBy: [] };
    const key = heldKeyOfSource(`hf://o/m@${COMMIT}`);
    const hosts = [gangHostFromView(view('a', []), 0, undefined, key)!, gangHostFromView(view('b', [held]), 0, undefined, key)!];
    const { fabrics } = rankGangFabrics(hosts, { nodes: 1, gpusPerNode: 8 });
    expect(fabrics[0]!.hosts.map((h) => h.nodeId)).toEqual(['b', 'a']);
  });

  it('matches only pinned sources llmgw fetches: an unpinned one, file:// or engine:// is never held', () => {
    expect(heldKeyOfSource(`hf://o/m@${COMMIT}`)).toBe(`o/m@${COMMIT}`);
    const digest = 'ab'.repeat(32);
    // As the host cache names an S3 revision (agent/weights/s3-layout.ts): the prefix without its slash, the digest's hex.
    expect(heldKeyOfSource(`s3://bucket/models/m/@sha256:${digest}`)).toBe(`s3://bucket/models/m@${digest}`);
    expect(sourceOfHeld('s3://bucket/models/m', digest)).toBe(`s3://bucket/models/m@sha256:${digest}`);
    expect(sourceOfHeld('o/m', COMMIT)).toBe(`hf://o/m@${COMMIT}`);
    expect(heldKeyOfSource('hf://o/m')).toBeUndefined();
    expect(heldKeyOfSource('s3://bucket/models/m')).toBeUndefined();
    expect(heldKeyOfSource('o/m')).toBeUndefined();
    expect(heldKeyOfSource('file:///models/m')).toBeUndefined();
    expect(heldKeyOfSource('engine://o/m')).toBeUndefined();
  });
});

describe("a host's report of the weights it holds", () => {
  it('names the running shards that use each revision, and not the stopped ones', () => {
    const shard = (shardId: string, source: string, state: ShardState) =>
      create(RunningShardSchema, {
        spec: { shardId, replicaId: `replica/d/${shardId}`, profile: { modelSource: source } },
        status: { shardId, state },
      });
    const held = heldWeightsOf(
      {
        list: () => [
          { repo: 'o/m', commit: COMMIT, bytes: 10, lastUsedAt: 0, inUse: true },
          { repo: 'o/n', commit: COMMIT, bytes: 20, lastUsedAt: 0, inUse: false },
        ],
      },
      [shard('s1', `hf://o/m@${COMMIT}`, ShardState.READY), shard('s2', `hf://o/n@${COMMIT}`, ShardState.STOPPED)],
    );
    expect(held.map((h) => [h.source, h.inUseBy])).toEqual([
      [`hf://o/m@${COMMIT}`, ['s1']],
      [`hf://o/n@${COMMIT}`, []],
    ]);
  });

  it("lands in the node's view and its memo keys", () => {
    const state = initialNodeState('n1');
    expect(viewOf(state).weights).toBeUndefined();
    state.weights = [{ source: `hf://o/m@${COMMIT}`, repo: 'o/m', commit: COMMIT, bytes: 1, lastUsedAt: '', inUseBy: [] }];
    expect(viewOf(state).weights).toHaveLength(1);
    expect(heldWeightKeys(state)).toEqual([`o/m@${COMMIT}`]);
  });
});
