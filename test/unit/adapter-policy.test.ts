// Where the router puts LoRA adapters: a hot adapter is wanted on more replicas than a cold one,
// and an adapter's heat is its share of its base's recent traffic, fading with time.
import { describe, expect, it } from 'vitest';
import { DemandMeter, replicasWanted } from '../../router/adapters/placement.js';

describe('adapter placement policy', () => {
  it('wants half the traffic on both of two replicas, a sixth on one, and never more replicas than there are', () => {
    expect(replicasWanted(0.5, 2, 1)).toBe(2);
    expect(replicasWanted(1 / 6, 2, 1)).toBe(1);
    expect(replicasWanted(0.1, 4, 1)).toBe(1);
    expect(replicasWanted(1, 4, 3)).toBe(4);
  });

  it('measures an adapter share of its base traffic, which fades once its requests stop', () => {
    const meter = new DemandMeter(1000);
    let share = 0;
    for (let t = 0; t < 40; t++) {
      share = meter.record('hot', 'base', t * 10);
      meter.record(`cold-${t}`, 'base', t * 10 + 5);
    }
    expect(share).toBeGreaterThan(0.45);
    expect(share).toBeLessThan(0.55);
    for (let t = 0; t < 40; t++) meter.record('other', 'base', 5000 + t * 10);
    expect(meter.record('hot', 'base', 5400)).toBeLessThan(0.1);
  });
});
