// Each node's reconcile Schedule is phased by its id, so a fleet's hourly sweeps spread over the
// hour instead of all firing at its top.
import { describe, expect, it } from 'vitest';
import { reconcileInterval } from '../../activities/reconcile-schedule.js';

describe('reconcileInterval', () => {
  it('gives each node a stable offset within the interval, spread over it', () => {
    const offsets = Array.from({ length: 200 }, (_, i) => reconcileInterval(`fleet-${i}`, 3600).offsetSeconds);
    expect(offsets.every((o) => o >= 0 && o < 3600)).toBe(true);
    expect(reconcileInterval('fleet-7', 3600)).toEqual(reconcileInterval('fleet-7', 3600));
    // 200 nodes over 60 minutes: no minute holds more than a small share of them.
    const perMinute = new Map<number, number>();
    for (const o of offsets) perMinute.set(Math.floor(o / 60), (perMinute.get(Math.floor(o / 60)) ?? 0) + 1);
    expect(Math.max(...perMinute.values())).toBeLessThanOrEqual(15);
    expect(reconcileInterval('x', 180).every).toBe('180 seconds');
  });
});
