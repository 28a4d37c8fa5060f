// The rollout planner (workflows/deploy-model/rollout.ts): surge when there is room, count a new
// replica only once routed, drain-first when there is none, never more than desired + maxSurge
// running, roll back on a failure.
import { describe, expect, it } from 'vitest';
import type { ReplicaPhase } from '../../common/replica-types.js';
import { newRollout, planRollout, UNSCHEDULABLE_LIMIT_MS } from '../../workflows/deploy-model/rollout.js';
import type { TrackedReplica } from '../../workflows/deploy-model/state.js';
import { NOW, snapshotOf, trackedReplica } from '../helpers/rollout.js';

const from = snapshotOf({ profile: 'p1', args: ['--a'] });
const to = snapshotOf({ profile: 'p2', args: ['--b'] });

let seq = 0;
const replica = (revision: string, phase: ReplicaPhase, extra: Partial<TrackedReplica> = {}): TrackedReplica =>
  trackedReplica(++seq, revision, { phase, ...extra });
const rollout = (policy = { maxSurge: 1, maxUnavailable: 0 }) => newRollout(from, to, policy, NOW, 'test');

describe('rollout planner', () => {
  it('surges one new replica when there is room, and drains an old one only once the new one is routed', () => {
    const old = [replica(from.revision, 'Ready'), replica(from.revision, 'Ready'), replica(from.revision, 'Ready')];
    expect(planRollout(rollout(), old, 3, Date.parse(NOW))).toMatchObject({ start: 1, drain: [] });
    const unrouted = replica(to.revision, 'Ready', { routed: false });
    expect(planRollout(rollout(), [...old, unrouted], 3, Date.parse(NOW))).toMatchObject({ start: 0, drain: [] });
    const routed = { ...unrouted, routed: true };
    const plan = planRollout(rollout(), [...old, routed], 3, Date.parse(NOW));
    expect(plan.start).toBe(0);
    expect(plan.drain).toHaveLength(1);
  });

  it('never runs more than desired + maxSurge, draining replicas included', () => {
    const draining = replica(from.revision, 'Draining', { stopping: true });
    const rest = [replica(from.revision, 'Ready'), replica(from.revision, 'Ready'), replica(to.revision, 'Ready', { routed: true })];
    expect(planRollout(rollout(), [draining, ...rest], 3, Date.parse(NOW)).start).toBe(0);
    expect(planRollout(rollout(), [{ ...draining, phase: 'Stopped' }, ...rest], 3, Date.parse(NOW)).start).toBe(1);
  });

  it('falls back to drain-first when the new replica has no room, one old replica at a time', () => {
    const old = [replica(from.revision, 'Ready'), replica(from.revision, 'Ready'), replica(from.revision, 'Ready')];
    const waiting = replica(to.revision, 'Unschedulable', { routed: false, reason: 'needs 1 GPUs, 0 free' });
    const plan = planRollout(rollout(), [...old, waiting], 3, Date.parse(NOW));
    expect(plan.mode).toBe('drain-first');
    expect(plan.drain.map((r) => r.replicaId)).toEqual([old[2]!.replicaId]);
    expect(plan.start).toBe(0);
    const next = planRollout(
      { ...rollout(), mode: 'drain-first' },
      [...old.slice(0, 2), { ...old[2]!, stopping: true }, waiting],
      3,
      Date.parse(NOW),
    );
    expect(next.drain).toEqual([]);
  });

  it('honours maxUnavailable with no surge: drain first, start once the old one is gone', () => {
    const old = [replica(from.revision, 'Ready'), replica(from.revision, 'Ready')];
    const plan = planRollout(rollout({ maxSurge: 0, maxUnavailable: 1 }), old, 2, Date.parse(NOW));
    expect(plan).toMatchObject({ start: 0 });
    expect(plan.drain).toHaveLength(1);
    const after = planRollout(
      rollout({ maxSurge: 0, maxUnavailable: 1 }),
      [{ ...old[0]!, phase: 'Stopped', stopping: true }, old[1]!],
      2,
      Date.parse(NOW),
    );
    expect(after.start).toBe(1);
  });

  it('rolls back when a new-revision replica fails, or waits for GPUs past the limit', () => {
    const old = [replica(from.revision, 'Ready')];
    const failed = replica(to.revision, 'Failed', { reason: 'engine crashed at start', since: '2026-12-03T12:01:00.000Z' });
    expect(planRollout(rollout(), [...old, failed], 1, Date.parse(NOW)).rollback).toMatch(/engine crashed at start/);
    const waiting = replica(to.revision, 'Unschedulable', { routed: false });
    const long = { ...rollout(), mode: 'drain-first' as const, waitingSince: NOW };
    expect(planRollout(long, [...old, waiting], 1, Date.parse(NOW) + UNSCHEDULABLE_LIMIT_MS + 1).rollback).toMatch(/waited for GPUs/);
  });

  it('holds while a new replica is restarting: no drain, no start, even if it waits for GPUs', () => {
    const old = [replica(from.revision, 'Ready'), replica(from.revision, 'Ready')];
    const restarting = replica(to.revision, 'Unschedulable', { routed: false, restarts: 3, reason: 'only nodes it failed on have room' });
    const plan = planRollout(rollout(), [...old, restarting], 2, Date.parse(NOW));
    expect(plan).toMatchObject({ start: 0, drain: [] });
    expect(plan.mode).toBeUndefined();
  });

  it('drains only one old replica below the count in drain-first mode until the new one is routed', () => {
    const old = [replica(from.revision, 'Ready'), replica(from.revision, 'Stopped', { stopping: true })];
    const waiting = replica(to.revision, 'Unschedulable', { routed: false });
    expect(planRollout({ ...rollout(), mode: 'drain-first' }, [...old, waiting], 2, Date.parse(NOW)).drain).toEqual([]);
  });

  it('rolls back to exactly the revision it came from', () => {
    const r = rollout();
    const back = newRollout(r.to, r.from, { maxSurge: r.maxSurge, maxUnavailable: r.maxUnavailable }, NOW, 'rolling back');
    expect(back.to.revision).toBe(from.revision);
    expect(back.from.revision).toBe(to.revision);
  });

  it('completes once every replica runs the new revision and is routed', () => {
    const fresh = [replica(to.revision, 'Ready', { routed: true }), replica(to.revision, 'Ready', { routed: true })];
    expect(planRollout(rollout(), [...fresh, replica(from.revision, 'Stopped')], 2, Date.parse(NOW)).complete).toBe(true);
    expect(
      planRollout(rollout(), [...fresh, replica(from.revision, 'Draining', { stopping: true })], 2, Date.parse(NOW)).complete,
    ).toBeUndefined();
  });
});
