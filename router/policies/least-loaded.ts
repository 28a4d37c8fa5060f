// Least outstanding work by the power of two choices: where a request goes when there is no
// cache to follow, where every retry goes, and the policy with cache-aware routing turned off.
import type { Candidate, PickRequest, RoutingPolicy } from './policy.js';

/**
 * Power of two choices over the candidates not yet tried for this request: two at random, the
 * lower score wins. It avoids the herd that "always the least loaded" causes when scores are a
 * second stale, at the cost of a scan only when some candidates are ruled out. When every
 * untried candidate is ejected they are used anyway: an ejection is a guess, and refusing the
 * request outright would make the router the reason it failed.
 */
export function pickLeastLoaded<T extends Candidate>(
  candidates: readonly T[],
  tried: readonly T[] | undefined,
  now: number,
  random: () => number = Math.random,
): T | undefined {
  let pool: readonly T[] = candidates;
  let allEligible = true;
  for (const c of candidates) {
    if (!eligible(c, tried, now, false)) {
      allEligible = false;
      break;
    }
  }
  if (!allEligible) {
    pool = candidates.filter((c) => eligible(c, tried, now, false));
    if (pool.length === 0) pool = candidates.filter((c) => eligible(c, tried, now, true));
  }
  const n = pool.length;
  if (n === 0) return undefined;
  if (n === 1) return pool[0];
  const i = Math.floor(random() * n);
  let j = Math.floor(random() * (n - 1));
  if (j >= i) j++;
  const a = pool[i] as T;
  const b = pool[j] as T;
  const sa = a.score();
  const sb = b.score();
  // Ties go to the first drawn, which is itself random, so idle replicas share the work.
  return sb < sa ? b : a;
}

/** The policy: every request least-loaded, keys ignored. */
export function leastLoaded<T extends Candidate>(): RoutingPolicy<T> {
  return {
    name: 'least-loaded',
    pick: (candidates: readonly T[], _request: PickRequest, now: number) => pickLeastLoaded(candidates, undefined, now),
  };
}

/** Whether `c` may take this attempt: available (or health ignored) and not tried yet. */
export function eligible(c: Candidate, tried: readonly Candidate[] | undefined, now: number, ignoreHealth: boolean): boolean {
  return (ignoreHealth || c.available(now)) && (tried === undefined || !tried.includes(c));
}
