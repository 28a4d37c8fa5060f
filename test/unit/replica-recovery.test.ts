// The replica's restart / re-place / give-up policy (workflows/replica/recovery.ts), as a pure function.
import { describe, expect, it } from 'vitest';
import { planRecovery, RECOVERY_LIMITS, type Failure } from '../../workflows/replica/recovery.js';
import type { ShardPlacement } from '../../common/replica-types.js';

const shard = (nodeId: string): ShardPlacement => ({
  rank: 0,
  nodeId,
  shardId: 'r.a1',
  gpuIndices: [0],
  hcas: [],
  managementAddress: '127.0.0.1',
  httpPort: 8000,
  pid: 42,
});
const crash: Failure = { kind: 'restart', reason: 'engine exited with code 1' };
const gone: Failure = { kind: 'replace', reason: 'node n2 lost', nodeId: 'n2', agentGone: true };

describe('planRecovery', () => {
  it('restarts on the same GPUs with a doubling backoff, then re-places avoiding the node', () => {
    const state = { restartsHere: 0, failedPlacements: 0, shards: [shard('n1')] };
    expect(planRecovery(state, crash)).toEqual({ kind: 'restart', restartsHere: 1, backoffMs: 2_000, reason: crash.reason });
    expect(planRecovery({ ...state, restartsHere: 1 }, crash)).toMatchObject({ kind: 'restart', restartsHere: 2, backoffMs: 4_000 });
    expect(planRecovery({ ...state, restartsHere: RECOVERY_LIMITS.restartsPerPlacement }, crash)).toEqual({
      kind: 'replace',
      failedNode: 'n1',
      agentGone: false,
      nodeLost: false,
      countsAsFailure: true,
      giveUp: false,
      reason: crash.reason,
    });
  });

  it('gives up when engine failures have used up the placements', () => {
    const state = { restartsHere: RECOVERY_LIMITS.restartsPerPlacement, failedPlacements: 1, shards: [shard('n1')] };
    expect(planRecovery(state, crash)).toMatchObject({ kind: 'replace', giveUp: true, countsAsFailure: true });
  });

  it('re-places at once when a host vanishes, and never counts it towards giving up', () => {
    const state = { restartsHere: 0, failedPlacements: 1, shards: [shard('n2')] };
    expect(planRecovery(state, gone)).toEqual({
      kind: 'replace',
      failedNode: 'n2',
      agentGone: true,
      nodeLost: false,
      countsAsFailure: false,
      giveUp: false,
      reason: gone.reason,
    });
  });

  it('fails at once, with no restart, when the agent refused what it was sent', () => {
    const state = { restartsHere: 0, failedPlacements: 0, shards: [shard('n1')] };
    expect(planRecovery(state, { kind: 'fail', reason: 'unsigned revision' })).toEqual({ kind: 'fail', reason: 'unsigned revision' });
  });
});
