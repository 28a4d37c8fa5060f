// The autoscaler's ladder awake → sleeping → stopped (issue 38, docs/autoscaling.md): an idle
// Ready replica is put to sleep after its profile's afterSeconds, one Update at a time and never
// to a sleeper, backing off after a refusal; load the awake replicas cannot carry wakes sleepers
// before a replica is added; a deployment that sleeps never goes idle-to-zero; the policy travels
// in the signed deployment entry. Pure rules with the clock passed in, and the Autoscaler's tick.
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { autoscalePolicy } from '../../common/autoscale.js';
import { signDeployment, verifyDeployment } from '../../common/route-signature.js';
import type { SleepPolicy, SleepRequest, WakeRequest } from '../../common/sleep-types.js';
import { Autoscaler } from '../../router/autoscale/autoscaler.js';
import { IdleSleeper, sleepersToWake, type ReplicaSeen } from '../../router/autoscale/idle-sleep.js';
import type { LoadReport } from '../../router/autoscale/load-report.js';
import { Stabilizer } from '../../router/autoscale/rule.js';
import type { DeploymentControl, SleepOutcome } from '../../router/autoscale/temporal.js';
import type { EngineSample } from '../../router/engines/endpoint.js';
import type { DeploymentEntry, RouteEntry } from '../../router/routes/table.js';
import { DeploymentEntrySchema } from '../../workflows/routes/state.js';
import { workerKey } from '../helpers/signers.js';

const policy: SleepPolicy = { afterSeconds: 3, level: 1, minAwakeSeconds: 20 };
const ready = (replicaId: string, active = false): ReplicaSeen => ({ replicaId, phase: 'Ready', active });

describe('idle sleep, the rule', () => {
  it('puts a replica to sleep once it has been Ready and idle for afterSeconds, and says why', () => {
    const rule = new IdleSleeper();
    expect(rule.step(policy, [ready('r/1')], 0)).toEqual([]);
    expect(rule.step(policy, [ready('r/1')], 2_000)).toEqual([]);
    expect(rule.step(policy, [ready('r/1')], 3_000)).toEqual([{ replicaId: 'r/1', reason: 'idle 3 s' }]);
  });

  it('restarts the idle clock on any activity, and ignores replicas that are not Ready', () => {
    const rule = new IdleSleeper();
    rule.step(policy, [ready('r/1')], 0);
    rule.step(policy, [ready('r/1', true)], 2_000);
    expect(rule.step(policy, [ready('r/1')], 4_000)).toEqual([]);
    expect(rule.step(policy, [ready('r/1')], 5_000)).toHaveLength(1);
    const starting = new IdleSleeper();
    for (const at of [0, 5_000, 10_000])
      expect(starting.step(policy, [{ replicaId: 'r/2', phase: 'Loading', active: false }], at)).toEqual([]);
    // Ready at 10 s: its idle time starts then.
    expect(starting.step(policy, [ready('r/2')], 11_000)).toEqual([]);
    expect(starting.step(policy, [ready('r/2')], 14_000)).toHaveLength(1);
  });

  it('asks once per replica at a time, and never a replica the table shows Sleeping', () => {
    const rule = new IdleSleeper();
    rule.step(policy, [ready('r/1')], 0);
    expect(rule.step(policy, [ready('r/1')], 3_000)).toHaveLength(1);
    expect(rule.step(policy, [ready('r/1')], 4_000)).toEqual([]);
    rule.answered(policy, 'r/1', 'asleep', 4_500);
    for (const at of [5_000, 60_000]) expect(rule.step(policy, [{ replicaId: 'r/1', phase: 'Sleeping', active: false }], at)).toEqual([]);
  });

  it('keeps a replica woken awake minAwakeSeconds, then sleeps it again when idle', () => {
    const rule = new IdleSleeper();
    rule.step(policy, [{ replicaId: 'r/1', phase: 'Sleeping', active: false }], 0);
    rule.step(policy, [ready('r/1')], 10_000);
    expect(rule.step(policy, [ready('r/1')], 29_000)).toEqual([]);
    expect(rule.step(policy, [ready('r/1')], 30_000)).toEqual([{ replicaId: 'r/1', reason: 'idle 20 s' }]);
  });

  it('backs off after a refusal (minAwakeSeconds when that is the reason) and after a failure', () => {
    const rule = new IdleSleeper();
    rule.step(policy, [ready('r/1')], 0);
    rule.step(policy, [ready('r/1')], 3_000);
    rule.answered(policy, 'r/1', 'refused', 3_100, 'r/1 was woken 2 s ago … stays awake at least 20 s (minAwakeSeconds)');
    expect(rule.step(policy, [ready('r/1')], 23_000)).toEqual([]);
    expect(rule.step(policy, [ready('r/1')], 23_100)).toHaveLength(1);
    rule.answered(policy, 'r/1', 'failed', 24_000);
    expect(rule.step(policy, [ready('r/1')], 53_000)).toEqual([]);
    expect(rule.step(policy, [ready('r/1')], 54_000)).toHaveLength(1);
  });

  it('wakes as many sleepers as the load is short of, the first by replica id, none while nothing is awake', () => {
    expect(sleepersToWake(1, 3, ['r/3', 'r/2', 'r/4'])).toEqual(['r/2', 'r/3']);
    expect(sleepersToWake(1, 1, ['r/2'])).toEqual([]);
    expect(sleepersToWake(0, 2, ['r/2'])).toEqual([]);
    expect(sleepersToWake(1, 9, ['r/2'])).toEqual(['r/2']);
  });

  it('leaves idle-to-zero to the sleepers when told so', () => {
    const scaling = autoscalePolicy({ min: 0, max: 2, idleToZeroSeconds: 5 });
    const signals = { running: 0, waiting: 0, kvCache: 0, queued: 0, inFlight: 0, routable: 1 };
    const plain = new Stabilizer(0);
    const ladder = new Stabilizer(0);
    expect(plain.step(scaling, 1, signals, false, 6_000).decision?.desired).toBe(0);
    for (let at = 0; at <= 600_000; at += 1_000) expect(ladder.step(scaling, 1, signals, false, at, false).decision).toBeUndefined();
  });
});

describe('the autoscaler on the ladder', () => {
  const t0 = Date.now();
  const sample = (at: number, requests: number, running = 0): EngineSample => ({
    running,
    waiting: 0,
    kvUsage: 0,
    requests,
    inflight: 0,
    at,
  });
  const route = (seq: number, phase: RouteEntry['phase']): RouteEntry => ({
    replicaId: `replica/lazy/${seq}`,
    deployment: 'lazy',
    servedName: 'lazy',
    endpoint: `http://127.0.0.1:${40000 + seq}`,
    phase,
    revision: 'r1',
  });
  const entry = (desired: number, extra: Partial<DeploymentEntry> = {}): DeploymentEntry => ({
    name: 'lazy',
    servedName: 'lazy',
    model: 'lazy',
    phase: 'Ready',
    desired,
    sleep: policy,
    ...extra,
  });

  function harness() {
    const calls = { sleeps: [] as Array<[string, SleepRequest]>, wakes: [] as Array<[string, WakeRequest]>, decisions: 0 };
    let report: LoadReport = { queued: {}, engines: {} };
    const registry = new Registry();
    const control: DeploymentControl = {
      decide: (_d, decision) => {
        calls.decisions++;
        return Promise.resolve({ accepted: true, desired: decision.desired });
      },
      wake: () => Promise.resolve({ accepted: true, desired: 1 }),
    };
    const autoscaler = new Autoscaler({
      control,
      sleep: (replicaId, request) => {
        calls.sleeps.push([replicaId, request]);
        return Promise.resolve<SleepOutcome>({ asleep: true });
      },
      wake: (replicaId, request) => {
        calls.wakes.push([replicaId, request]);
        return Promise.resolve({ replicaId, wokeInMs: 800, alreadyAwake: false });
      },
      registry,
      reports: () => [report],
      routerId: 'r-a',
      log: () => undefined,
    });
    return { calls, registry, autoscaler, setReport: (r: LoadReport) => (report = r) };
  }

  it('puts an idle replica to sleep once, as autoscaler:<router id>, and counts it', async () => {
    const { calls, registry, autoscaler, setReport } = harness();
    const one = route(1, 'Ready');
    autoscaler.setTable({ routes: [one], deployments: [entry(1)] });
    for (let s = 0; s <= 5; s++) {
      setReport({ queued: {}, engines: { [one.endpoint]: sample(t0 + s * 1000, 7) } });
      autoscaler.tick(t0 + s * 1000);
      await Promise.resolve();
    }
    expect(calls.sleeps).toEqual([['replica/lazy/1', { by: 'autoscaler:r-a', reason: 'idle 3 s' }]]);
    expect(await registry.getSingleMetricAsString('llmgw_autoscaler_sleeps_total')).toMatch(
      /llmgw_autoscaler_sleeps_total\{deployment="lazy",result="asleep"\} 1/,
    );
    // The table shows it asleep: nothing more is sent.
    autoscaler.setTable({ routes: [{ ...one, phase: 'Sleeping' }], deployments: [entry(1)] });
    for (let s = 6; s <= 30; s++) autoscaler.tick(t0 + s * 1000);
    expect(calls.sleeps).toHaveLength(1);
  });

  it('keeps a replica that serves, or whose model has requests held, awake', () => {
    const { calls, autoscaler, setReport } = harness();
    const one = route(1, 'Ready');
    autoscaler.setTable({ routes: [one], deployments: [entry(1)] });
    for (let s = 0; s <= 10; s++) {
      setReport({ queued: s > 5 ? { lazy: 1 } : {}, engines: { [one.endpoint]: sample(t0 + s * 1000, s < 5 ? s : 5) } });
      autoscaler.tick(t0 + s * 1000);
    }
    expect(calls.sleeps).toEqual([]);
  });

  it('wakes a sleeper for load the awake replica cannot carry, and adds no replica while one sleeps', () => {
    const { calls, autoscaler, setReport } = harness();
    const awake = route(1, 'Ready');
    const asleep = route(2, 'Sleeping');
    const scaling = autoscalePolicy({ min: 0, max: 4, target: 2, upAfterSeconds: 1 });
    autoscaler.setTable({ routes: [awake, asleep], deployments: [entry(2, { autoscale: scaling })] });
    for (let s = 0; s <= 9; s++) {
      // 12 running on one awake replica: six times its target, and three times what two are sized for.
      setReport({ queued: {}, engines: { [awake.endpoint]: sample(t0 + s * 1000, 100 + s, 12) } });
      autoscaler.tick(t0 + s * 1000);
    }
    // One wake, not one a tick (within the settling time), and no count sent while the sleeper is there.
    expect(calls.wakes).toEqual([['replica/lazy/2', { by: 'autoscaler:r-a', reason: 'the load asks for 4 awake replica(s), 1 are' }]]);
    expect(calls.decisions).toBe(0);
    // Woken, and the load still over both: now the windows add a replica.
    autoscaler.setTable({ routes: [awake, { ...asleep, phase: 'Ready' }], deployments: [entry(2, { autoscale: scaling })] });
    for (let s = 10; s <= 14; s++) {
      const engines = { [awake.endpoint]: sample(t0 + s * 1000, 200 + s, 12), [asleep.endpoint]: sample(t0 + s * 1000, 300 + s, 12) };
      setReport({ queued: {}, engines });
      autoscaler.tick(t0 + s * 1000);
    }
    expect(calls.decisions).toBe(1);
  });

  it('never takes a deployment that sleeps idle-to-zero', () => {
    const { calls, autoscaler, setReport } = harness();
    const asleep = route(1, 'Sleeping');
    const scaling = autoscalePolicy({ min: 0, max: 2, idleToZeroSeconds: 2 });
    autoscaler.setTable({ routes: [asleep], deployments: [entry(1, { autoscale: scaling })] });
    for (let s = 0; s <= 20; s++) {
      setReport({ queued: {}, engines: {} });
      autoscaler.tick(t0 + s * 1000);
    }
    expect(calls.decisions).toBe(0);
    expect(calls.sleeps).toEqual([]);
  });
});

describe('the sleep policy in the deployment entry', () => {
  const plain: DeploymentEntry = { name: 'lazy', servedName: 'lazy', model: 'lazy', phase: 'Ready', desired: 1 };
  it('is kept by the routes workflow, optional, and covered by the signature', () => {
    expect(DeploymentEntrySchema.parse({ ...plain, sleep: policy }).sleep).toEqual(policy);
    expect(DeploymentEntrySchema.parse(plain).sleep).toBeUndefined();
    const { keys } = workerKey();
    const signed = { ...plain, sleep: policy, signature: signDeployment({ ...plain, sleep: policy }, keys) };
    expect(verifyDeployment(signed, keys.all).ok).toBe(true);
    expect(verifyDeployment({ ...signed, sleep: { ...policy, afterSeconds: 1 } }, keys.all).ok).toBe(false);
    // An entry signed without a policy still verifies as it was.
    const old = { ...plain, signature: signDeployment(plain, keys) };
    expect(verifyDeployment(old, keys.all).ok).toBe(true);
  });
});
