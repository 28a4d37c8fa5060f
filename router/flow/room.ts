// Which replicas have room for a request now, as flow control sees it. Uncontended (one tenant,
// one priority lately) an engine takes requests until its own line reaches the saturation
// threshold, as before priorities. Contended, a request leaves the router only for a free slot
// (an engine's line is first come first served and would undo the router's order), and the last
// few free slots of each engine are kept for critical requests and for tenants below their
// weighted share, so that they start at once instead of waiting for a slot to free behind a
// tenant that sends ten times as much; hence also how long a request joining the line waits for
// its slot (what a deadline's prediction adds). Router side; pure over the replicas' state.
import { predictLineMs, type Predictable } from './deadline.js';
import type { FlowClass } from './priority.js';
import type { ModelQueue } from './queue.js';
import type { TenantShares } from './tenant-shares.js';

/** What room needs to know of a replica (engines/endpoint.ts Endpoint is one). */
export interface Roomy {
  /** Free slots if nothing more were sent (negative: a line); Infinity while its capacity is unknown. */
  freeSlots(): number;
  /** Slots it runs at once; NaN until learned. */
  concurrency(): number;
  /** This router's requests there now. */
  readonly inflight: number;
}

export interface RoomSettings {
  /** An engine with this many requests waiting takes no more; undefined turns flow control off. */
  saturatedWaiting: number | undefined;
  /** The share of each engine's slots kept for critical requests and tenants below their share while contended. */
  keptShare: number;
}

export const DEFAULT_KEPT_SHARE = 0.125;

/** One look at a model's contention, taken once per decision. */
export interface Contention {
  readonly contended: boolean;
  /** The model's slots across its replicas (what tenants' shares are of). */
  readonly slots: number;
  readonly now: number;
}

export function contentionOf(shares: TenantShares, replicas: readonly Roomy[], now: number): Contention {
  let slots = 0;
  for (const e of replicas) {
    const c = e.concurrency();
    slots += Number.isFinite(c) ? c : 0;
  }
  return { contended: shares.contended(now), slots, now };
}

/** Slots of this engine kept free for who is behind: none while its capacity is unknown or small. */
export function keptSlots(e: Roomy, keptShare: number): number {
  const slots = e.concurrency();
  if (!Number.isFinite(slots) || slots < 4 || keptShare <= 0) return 0;
  return Math.max(1, Math.floor(slots * keptShare));
}

/** Whether `e` may take a request now: `privileged` (flow control's own judgement) may use kept slots. */
export function hasRoom(e: Roomy, settings: RoomSettings, contention: Contention, privileged: boolean): boolean {
  const threshold = settings.saturatedWaiting;
  if (threshold === undefined) return true;
  const free = e.freeSlots();
  if (!contention.contended) return -free < threshold;
  if (free > (privileged ? 0 : keptSlots(e, settings.keptShare))) return true;
  // With nothing of this router's there, the engine's line is other routers' (who may see no
  // contention and fill it): held to the uncontended rule, not to free slots it may never see.
  return e.inflight === 0 && -free < threshold;
}

/** Whether a request of this class may take kept slots now. */
export function isPrivileged(shares: TenantShares, flow: FlowClass, contention: Contention): boolean {
  return contention.contended && shares.privileged(flow, contention.slots, contention.now);
}

/**
 * How long a request of `flow` joining the line now is predicted to wait there: a slot's freeing
 * for each request that leaves before it and one for itself. When no replica has an open slot but
 * it may take a kept one, only those allowed the kept slots go before it, and the kept slots free
 * now need no waiting.
 */
export function lineWaitMs(
  q: ModelQueue,
  replicas: ReadonlyArray<Roomy & Predictable>,
  settings: RoomSettings,
  flow: FlowClass,
  contention: Contention,
  privileged: boolean,
): number {
  const open = replicas.some((e) => hasRoom(e, settings, contention, false));
  if (!privileged || open) return predictLineMs(q.aheadOf(flow) + 1, replicas);
  let keptFree = 0;
  for (const e of replicas) {
    const free = e.freeSlots();
    if (Number.isFinite(free) && free > 0) keptFree += free;
  }
  const ahead = q.aheadOf(flow, (other) => isPrivileged(q.shares, other, contention));
  return predictLineMs(Math.max(0, ahead + 1 - keptFree), replicas);
}
