// The autoscaler's pure parts: stabilization windows over recommendReplicas (up after the up
// window, at once past twice the capacity, down after the down window, zero only when idle, no
// flapping), and the load reports of router processes merged.
import { describe, expect, it } from 'vitest';
import { autoscalePolicy } from '../../common/autoscale.js';
import { Stabilizer, type DeploymentSignals } from '../../router/autoscale/rule.js';
import { mergeReports } from '../../router/autoscale/load-report.js';

const load = (inFlight: number, extra: Partial<DeploymentSignals> = {}): DeploymentSignals => ({
  running: inFlight,
  waiting: 0,
  kvCache: 0,
  queued: 0,
  inFlight,
  routable: 1,
  ...extra,
});

/** Steps once a second from `from` for `seconds`, the count following each decision; returns the decisions. */
function run(
  s: Stabilizer,
  policy: ReturnType<typeof autoscalePolicy>,
  start: { current: number; from: number },
  seconds: number,
  signals: (t: number) => DeploymentSignals,
  active = true,
): Array<{ at: number; desired: number; reason: string }> {
  const out: Array<{ at: number; desired: number; reason: string }> = [];
  for (let t = 0; t <= seconds; t++) {
    const now = start.from + t * 1000;
    const step = s.step(policy, start.current, signals(t), active, now);
    if (step.decision && step.decision.desired !== start.current) {
      out.push({ at: t, desired: step.decision.desired, reason: step.decision.reason });
      start.current = step.decision.desired;
      s.decided();
    }
  }
  return out;
}

describe('stabilization', () => {
  const policy = autoscalePolicy({ min: 1, max: 8, target: 8, upAfterSeconds: 30, downAfterSeconds: 300 });

  it('scales up only once demand has lasted the up window, to the least it asked for over the window', () => {
    const s = new Stabilizer(0);
    const start = { current: 2, from: 0 };
    // 30 in flight (4 wanted) for 10 s, then 20 (3 wanted): under twice the capacity, never panic.
    const decisions = run(s, policy, start, 40, (t) => load(t < 10 ? 30 : 20));
    expect(decisions).toEqual([{ at: 30, desired: 3, reason: expect.stringContaining('3 wanted for 30 s') as string }]);
  });

  it('scales up at once (after a tenth of the up window) when demand is over twice the capacity', () => {
    const s = new Stabilizer(0);
    const start = { current: 1, from: 0 };
    const decisions = run(s, policy, start, 5, () => load(40));
    expect(decisions).toHaveLength(1);
    expect(decisions[0]).toMatchObject({ at: 3, desired: 5 });
    expect(decisions[0]?.reason).toMatch(/^panic/);
  });

  it('a dip below the count restarts the up window: a load that hovers costs nothing', () => {
    const s = new Stabilizer(0);
    const decisions = run(s, policy, { current: 2, from: 0 }, 600, (t) => load(t % 20 < 10 ? 18 : 14));
    expect(decisions).toEqual([]);
  });

  it('scales down after the down window, to the most it asked for; at most one down per window', () => {
    const s = new Stabilizer(0);
    const start = { current: 4, from: 0 };
    const decisions = run(s, policy, start, 900, (t) => load(t < 100 ? 12 : 4));
    expect(decisions.map((d) => [d.at, d.desired])).toEqual([
      [300, 2],
      [601, 1],
    ]);
  });

  it('goes to zero only after idleToZeroSeconds without a request, and load alone never does', () => {
    const zero = autoscalePolicy({ min: 0, max: 4, idleToZeroSeconds: 60, downAfterSeconds: 10 });
    const busy = new Stabilizer(0);
    // Light load (below one replica's target) for ten minutes: stays at one.
    expect(run(busy, zero, { current: 1, from: 0 }, 600, () => load(1))).toEqual([]);
    const idle = new Stabilizer(0);
    const decisions = run(idle, zero, { current: 1, from: 0 }, 100, () => load(0), false);
    expect(decisions).toEqual([{ at: 60, desired: 0, reason: expect.stringMatching(/^idle to zero/) as string }]);
  });

  it('at zero, requests held at routers ask for replicas at once', () => {
    const zero = autoscalePolicy({ min: 0, max: 4, idleToZeroSeconds: 60 });
    const step = new Stabilizer(0).step(zero, 0, load(0, { queued: 20, routable: 0 }), true, 0);
    expect(step.decision).toMatchObject({ desired: 3, direction: 'up' });
  });
});

describe('load reports', () => {
  it('sums held requests and in-flight counts over router processes, keeping each engine’s freshest scrape', () => {
    const sample = (at: number, running: number, inflight: number) => ({ running, waiting: 0, kvUsage: 0, requests: 5, inflight, at });
    const merged = mergeReports([
      { queued: { m: 2 }, engines: { e: sample(100, 3, 1) } },
      { queued: { m: 1, n: 4 }, engines: { e: sample(200, 4, 2) } },
    ]);
    expect(merged.queued).toEqual({ m: 3, n: 4 });
    expect(merged.engines.e).toMatchObject({ running: 4, inflight: 3, at: 200 });
  });
});
