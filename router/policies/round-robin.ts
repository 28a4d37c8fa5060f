// Round-robin over the available endpoints: the baseline bench:affinity compares the others with;
// never chosen by the router on its own.
import { pickLeastLoaded } from './least-loaded.js';
import type { Candidate, PickRequest, RoutingPolicy } from './policy.js';

export function roundRobin<T extends Candidate>(): RoutingPolicy<T> {
  let turn = 0;
  return {
    name: 'round-robin',
    pick(candidates: readonly T[], _request: PickRequest, now: number): T | undefined {
      const n = candidates.length;
      for (let k = 0; k < n; k++) {
        const c = candidates[turn++ % n] as T;
        if (c.available(now)) return c;
      }
      return pickLeastLoaded(candidates, undefined, now);
    },
  };
}
