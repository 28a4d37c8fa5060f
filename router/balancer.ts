// Which replica gets a request when there is no cache to follow: least outstanding work by the
// power of two choices; and whether cache-aware routing (affinity.ts) is on for a deployment.
// Pure logic over Candidates; the router's Endpoint is one. Router side.
import type { EngineCosts } from './endpoint.js';

/** What the balancer needs to know about a replica's endpoint. */
export interface Candidate {
  readonly url: string;
  /** Requests this router has in flight there. */
  inflight: number;
  /** Lower is better: in-flight work plus what the engine's metrics say beyond it. */
  score(): number;
  /** Requests the engine holds: this router's in flight and, from its metrics, everybody else's. */
  load(): number;
  /** False while ejected for failing. */
  available(now: number): boolean;
  // What load before locality weighs (affinity.ts); a candidate without them is guarded by in-flight gaps.
  /** Requests that would wait ahead of one more sent now. */
  queued?(): number;
  /** Requests sent there without a byte of answer yet (queued or prefilling). */
  readonly prefilling?: number;
  /** Requests the engine runs at once; NaN until learned. */
  concurrency?(): number;
  /** Whether the engine's load has been read (its metrics page); queued() means nothing before. */
  reportsLoad?(): boolean;
  /** What a request and a prefilled token cost on it. */
  readonly costs?: EngineCosts;
}

export function eligible(c: Candidate, tried: readonly Candidate[] | undefined, now: number, ignoreHealth: boolean): boolean {
  return (ignoreHealth || c.available(now)) && (tried === undefined || !tried.includes(c));
}

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

/** FNV-1a over the first `limit` UTF-16 units, finished with murmur3's mixer for an even spread. */
export function hashText(text: string, limit = text.length): number {
  let h = 0x811c9dc5;
  const n = Math.min(limit, text.length);
  for (let i = 0; i < n; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Whether cache-aware routing is on, for all deployments and for some by name. */
export interface AffinitySettings {
  /** For every deployment not named: on by default. */
  enabled: boolean;
  /** Deployment or served name → on or off. */
  byName: ReadonlyMap<string, boolean>;
}

export const AFFINITY_ON: AffinitySettings = { enabled: true, byName: new Map() };

/**
 * `on`, `off`, `NAME:on`, `NAME:off`, comma-separated (--affinity or LLMGW_ROUTER_AFFINITY):
 * `off,chat:on` turns it off everywhere but for chat. Throws naming the part that is wrong.
 */
export function parseAffinity(spec: string | undefined): AffinitySettings {
  let enabled = true;
  const byName = new Map<string, boolean>();
  if (!spec) return { enabled, byName };
  for (const raw of spec.split(',')) {
    const part = raw.trim();
    if (part === '') continue;
    const colon = part.lastIndexOf(':');
    const name = colon < 0 ? '' : part.slice(0, colon).trim();
    const mode = (colon < 0 ? part : part.slice(colon + 1)).trim();
    if (mode !== 'on' && mode !== 'off') throw new Error(`affinity "${part}" must be on, off, NAME:on or NAME:off`);
    if (colon < 0) enabled = mode === 'on';
    else if (name === '') throw new Error(`affinity "${part}" names no deployment`);
    else byName.set(name, mode === 'on');
  }
  return { enabled, byName };
}
