// Which replicas have room for a request now, as flow control sees it. Uncontended (one tenant,
// one priority lately) an engine takes requests until its own line reaches the saturation
// threshold, as before priorities. Contended, a request leaves the router only for a free slot
// (an engine's line is first come first served and would undo the router's order), and the last
// few free slots of each engine are kept for critical requests and for tenants below their
// weighted share, so that they start at once instead of waiting for a slot to free behind a
// tenant that sends ten times as much. Sheddable requests (a batch's lines) leave free, beyond
// those, the slots the requests above them needed at their recent peak, so that interactive
// bursts find slots instead of waiting for a batch line to end. Hence also how long a request
// joining the line waits for its slot (what a deadline's prediction adds). Router side; pure over
// the replicas' state.
import { predictLineMs, type Predictable } from './deadline.js';
import { isSheddable, type FlowClass } from './priority.js';
import type { Held, ModelQueue } from './queue.js';
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
  /** Slots across the replicas that sheddable requests leave for those above them (TenantShares.reserveForAbove). */
  readonly reserve: number;
}

/**
 * Which free slots a request may take while contended: the kept ones too (critical, or its
 * tenant below its share), only the open ones, or, sheddable, only those left once the
 * requests above it have their reserve.
 */
export type Standing = 'kept' | 'open' | 'spare';

export function contentionOf(shares: TenantShares, replicas: readonly Roomy[], now: number): Contention {
  let slots = 0;
  for (const e of replicas) {
    const c = e.concurrency();
    slots += Number.isFinite(c) ? c : 0;
  }
  const contended = shares.contended(now);
  return { contended, slots, now, reserve: contended ? shares.reserveForAbove(now) : 0 };
}

/** The request's standing now (uncontended, every request is `open`: nothing is kept). */
export function standingOf(shares: TenantShares, flow: FlowClass, contention: Contention): Standing {
  if (!contention.contended) return 'open';
  if (shares.privileged(flow, contention.slots, contention.now)) return 'kept';
  return isSheddable(flow.priority) ? 'spare' : 'open';
}

/** Slots of this engine kept free for who is behind: none while its capacity is unknown or small. */
export function keptSlots(e: Roomy, keptShare: number): number {
  const slots = e.concurrency();
  if (!Number.isFinite(slots) || slots < 4 || keptShare <= 0) return 0;
  return Math.max(1, Math.floor(slots * keptShare));
}

/** Whether `e` may take a request of this standing now. */
export function hasRoom(e: Roomy, settings: RoomSettings, contention: Contention, standing: Standing): boolean {
  const threshold = settings.saturatedWaiting;
  if (threshold === undefined) return true;
  const free = e.freeSlots();
  if (!contention.contended) return -free < threshold;
  if (free > slotsLeftFree(e, settings, contention, standing)) return true;
  // With nothing of this router's there, the engine's line is other routers' (who may see no
  // contention and fill it): held to the uncontended rule, not to free slots it may never see.
  return e.inflight === 0 && -free < threshold;
}

/** Free slots of `e` a request of this standing must leave to others. */
function slotsLeftFree(e: Roomy, settings: RoomSettings, contention: Contention, standing: Standing): number {
  if (standing === 'kept') return 0;
  const kept = keptSlots(e, settings.keptShare);
  if (standing === 'open' || contention.reserve === 0) return kept;
  // The reserve is the model's; each replica keeps its part of it, by its slots, rounded down so
  // that across many replicas no more than the reserve is kept in all.
  const slots = e.concurrency();
  if (!Number.isFinite(slots) || contention.slots <= 0) return kept;
  return kept + Math.floor((contention.reserve * slots) / contention.slots);
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
  standing: Standing,
): number {
  const open = replicas.some((e) => hasRoom(e, settings, contention, 'open'));
  if (standing !== 'kept' || open) return predictLineMs(q.aheadOf(flow) + 1, replicas);
  let keptFree = 0;
  for (const e of replicas) {
    const free = e.freeSlots();
    if (Number.isFinite(free) && free > 0) keptFree += free;
  }
  const ahead = q.aheadOf(flow, (other) => standingOf(q.shares, other, contention) === 'kept');
  return predictLineMs(Math.max(0, ahead + 1 - keptFree), replicas);
}

/**
 * The next held request a replica has room for, by the line's order among those whose standing
 * finds a slot: any when an engine has slots beyond the kept ones and the reserve; when fewer
 * are free, only those allowed them (critical, below its tenant's share; above sheddable);
 * undefined when nothing can go. Taken off the line, and held to its standing's replicas.
 */
export function nextToSend(q: ModelQueue, replicas: readonly Roomy[], settings: RoomSettings, contention: Contention): Held | undefined {
  if (settings.saturatedWaiting === undefined) return q.shift();
  if (!contention.contended) return replicas.some((e) => hasRoom(e, settings, contention, 'open')) ? q.shift() : undefined;
  // Whether some replica has room for each standing, asked once per standing: a drain that
  // finds nothing to send (a batch waiting) costs a pass over the replicas, not one per tenant.
  const roomFor = new Map<Standing, boolean>();
  const fits = (flow: FlowClass) => {
    const standing = standingOf(q.shares, flow, contention);
    let room = roomFor.get(standing);
    if (room === undefined) roomFor.set(standing, (room = replicas.some((e) => hasRoom(e, settings, contention, standing))));
    return room;
  };
  const held = q.shiftWhere(fits);
  if (held === undefined) return undefined;
  const standing = standingOf(q.shares, held.request.flow, contention);
  held.request.eligible = (e) => hasRoom(e, settings, contention, standing);
  return held;
}
