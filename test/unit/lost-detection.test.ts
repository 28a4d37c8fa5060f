// How a host is found silent and when it may be declared Lost: the liveness sweep's heartbeat
// ages (no clock in common with the agents) and the hold while most of the fleet is silent.
import { describe, expect, it } from 'vitest';
import { HeartbeatAges } from '../../workers/liveness.js';
import { createFleetSilenceActivities } from '../../activities/fleet-silence.js';
import { lostHeldBecause } from '../../workflows/node/state.js';

describe('HeartbeatAges', () => {
  it('measures silence by our clock from the last change, so a host clock far behind is not silent', () => {
    const ages = new HeartbeatAges();
    const skewed = 1_000_000; // the agent's clock, an hour behind ours
    ages.update(new Map([['agent/a', skewed]]), 10_000_000);
    ages.update(new Map([['agent/a', skewed + 5_000]]), 10_005_000);
    expect(ages.age('agent/a', 10_006_000)).toBe(1_000);
    expect(ages.heard('agent/a', 10_006_000, 10_000)).toBe(true);
    // No new heartbeat: silent from the last change.
    ages.update(new Map([['agent/a', skewed + 5_000]]), 10_020_000);
    expect(ages.age('agent/a', 10_020_000)).toBe(15_000);
    expect(ages.heard('agent/a', 10_020_000, 10_000)).toBe(false);
  });

  it('counts a heartbeat first seen as fresh but not as heard, and never beaten as unknown', () => {
    const ages = new HeartbeatAges();
    ages.update(new Map([['agent/a', 5]]), 1_000);
    expect(ages.age('agent/a', 3_000)).toBe(2_000);
    expect(ages.heard('agent/a', 3_000, 10_000)).toBe(false);
    expect(ages.age('agent/b', 3_000)).toBeUndefined();
  });

  it('after a sweep that could not reach Temporal, counts silence again and takes only a new heartbeat as heard', () => {
    const ages = new HeartbeatAges();
    ages.update(new Map([['agent/a', 1]]), 0);
    ages.update(new Map([['agent/a', 2]]), 5_000);
    ages.forget();
    // 60 s without a look: the dead agent's old heartbeat is not news, nor is its silence.
    ages.update(new Map([['agent/a', 2]]), 65_000);
    expect(ages.age('agent/a', 65_000)).toBe(0);
    expect(ages.heard('agent/a', 65_000, 10_000)).toBe(false);
    ages.update(new Map([['agent/a', 3]]), 67_000);
    expect(ages.heard('agent/a', 67_000, 10_000)).toBe(true);
  });
});

describe('lostHeldBecause', () => {
  it('lets one or a minority of silent hosts turn Lost', () => {
    expect(lostHeldBecause({ heard: 3, silent: 1, ageMs: 0 })).toBeUndefined();
    expect(lostHeldBecause({ heard: 2, silent: 2, ageMs: 0 })).toBeUndefined();
    // A fleet of one: nothing else to place on, nothing to protect.
    expect(lostHeldBecause({ heard: 0, silent: 1, ageMs: 0 })).toBeUndefined();
  });

  it('holds when most of the fleet is silent at once, and says why', () => {
    expect(lostHeldBecause({ heard: 1, silent: 3, ageMs: 0 })).toMatch(/3 of 4 nodes are silent at once.*control plane/);
    expect(lostHeldBecause({ heard: 0, silent: 2, ageMs: 0 })).toMatch(/cordon/);
  });

  it('holds nothing without a recent view of the fleet', async () => {
    expect(lostHeldBecause(undefined)).toBeUndefined();
    const { fleetSilence } = createFleetSilenceActivities(() => ({ at: Date.now() - 60_000, heard: [], silent: ['a', 'b', 'c'] }));
    expect(await fleetSilence()).toBeUndefined();
    const fresh = createFleetSilenceActivities(() => ({ at: Date.now(), heard: ['d'], silent: ['a', 'b', 'c'] }));
    expect(await fresh.fleetSilence()).toMatchObject({ heard: 1, silent: 3 });
  });
});
