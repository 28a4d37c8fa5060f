// A rollout fetches the new revision's weights before it drains (workflows/deploy-model/rollout.ts):
// onto the hosts of the old replicas, only when llmgw fetches the new source and it changed,
// and no drain is planned until that is done.
import { describe, expect, it } from 'vitest';
import { newRollout, planPrefetch, planRollout } from '../../workflows/deploy-model/rollout.js';
import type { TrackedReplica } from '../../workflows/deploy-model/state.js';
import { NOW, snapshotOf, trackedReplica } from '../helpers/rollout.js';

const OLD = `hf://o/m@${'a'.repeat(40)}`;
const NEW = `hf://o/m@${'b'.repeat(40)}`;
const snapshot = (modelSource: string) => snapshotOf({ modelSource, gpusPerNode: 8 });
const from = snapshot(OLD);
const to = snapshot(NEW);
const replica = (seq: number, revision: string, nodes: string[]): TrackedReplica => trackedReplica(seq, revision, { nodes });

describe('fetching ahead of a rollout', () => {
  const replicas = [replica(1, from.revision, ['h2']), replica(2, from.revision, ['h1']), replica(3, from.revision, ['h1'])];

  it('fetches the new weights onto the hosts the old replicas run on', () => {
    const rollout = newRollout(from, to, { maxSurge: 0, maxUnavailable: 1 }, NOW, 'test');
    expect(planPrefetch(rollout, replicas)).toEqual({ state: 'Fetching', modelSource: NEW, nodes: ['h1', 'h2'] });
  });

  it('fetches nothing when the weights did not change, or llmgw does not fetch them', () => {
    const argsOnly = { ...from, args: ['--x'], revision: 'r-other' };
    expect(planPrefetch(newRollout(from, argsOnly, { maxSurge: 1, maxUnavailable: 0 }, NOW, 'test'), replicas).state).toBe('Done');
    const fileSource = snapshot('file:///models/m');
    expect(planPrefetch(newRollout(from, fileSource, { maxSurge: 1, maxUnavailable: 0 }, NOW, 'test'), replicas).state).toBe('Done');
  });

  it('drains nothing until the weights are there, then drains as before', () => {
    const rollout = newRollout(from, to, { maxSurge: 0, maxUnavailable: 1 }, NOW, 'test');
    rollout.prefetch = planPrefetch(rollout, replicas);
    const holding = planRollout(rollout, replicas, 3, Date.parse(NOW));
    expect(holding.drain).toEqual([]);
    expect(holding.notes.join(' ')).toMatch(/before draining anything/);
    rollout.prefetch.state = 'Done';
    expect(planRollout(rollout, replicas, 3, Date.parse(NOW)).drain).toHaveLength(1);
  });
});
