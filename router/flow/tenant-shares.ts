// Who is using a deployment through this router process, for flow control: each tenant's
// requests in flight, its weight, and when it was last seen; each priority's last sighting. From
// them, whether the deployment is contended (more than one tenant or priority active) and whether
// a tenant is below its weighted share of the deployment's slots, which lets it take the slots
// kept free (flow/room.ts); and how many slots sheddable work (a batch) must leave for the
// requests above it, from their recent peak. Router side; one per model line (flow/queue.ts),
// pure bookkeeping.
import { isSheddable, PRIORITIES, type FlowClass } from './priority.js';
import { WindowPeak } from './window-peak.js';

/** A tenant or priority seen this recently is still active: a chat user between two turns is. */
export const ACTIVE_MS = 5000;

interface TenantUse {
  weight: number;
  inflight: number;
  /** Requests of it held in the line. */
  held: number;
  lastSeen: number;
  /** Of its requests in flight, those above sheddable. */
  inflightAbove: number;
  /** Of its requests held, those above sheddable: a tenant waiting in the line keeps its share however long it waits. */
  heldAbove: number;
  /** When it last had a request above sheddable arrive, wait or end; -Infinity: never. */
  aboveSeen: number;
}

/** How long a count of who is active is used before it is made again: admission must not walk every tenant per request. */
const RECOUNT_MS = 100;

export class TenantShares {
  private readonly tenants = new Map<string, TenantUse>();
  private readonly priorities = new Map<number, number>();
  /** The last count: active tenants, the weights of those with requests above sheddable, active priorities, and when it was made. */
  private counted = { tenants: 0, weightsAbove: 0, priorities: 0, at: -Infinity };
  /** Requests above sheddable in flight, across tenants, and their recent peak. */
  private inflightAbove = 0;
  private readonly peakAbove = new WindowPeak();

  /** A request of this class arrived (held or sent). */
  seen(flow: FlowClass, now: number): void {
    const use = this.use(flow, now);
    use.lastSeen = now;
    if (!isSheddable(flow.priority)) this.sawAbove(use, now);
    if (!this.priorities.has(flow.priority)) this.counted.at = -Infinity;
    this.priorities.set(flow.priority, now);
  }

  held(flow: FlowClass, delta: 1 | -1, now: number): void {
    const use = this.use(flow, now);
    use.held += delta;
    use.lastSeen = now;
    if (isSheddable(flow.priority)) return;
    use.heldAbove = Math.max(0, use.heldAbove + delta);
    this.sawAbove(use, now);
  }

  started(flow: FlowClass, now: number): void {
    const use = this.use(flow, now);
    use.inflight++;
    use.lastSeen = now;
    if (isSheddable(flow.priority)) return;
    use.inflightAbove++;
    this.sawAbove(use, now);
    this.peakAbove.note(++this.inflightAbove, now);
  }

  finished(flow: FlowClass, now: number): void {
    const use = this.tenants.get(flow.tenant);
    if (use === undefined) return;
    use.inflight = Math.max(0, use.inflight - 1);
    use.lastSeen = now;
    if (isSheddable(flow.priority) || use.inflightAbove === 0) return;
    use.inflightAbove--;
    this.sawAbove(use, now);
    this.peakAbove.note(--this.inflightAbove, now);
  }

  /**
   * Slots sheddable requests leave free, beyond the kept ones, for the requests above them: how
   * many more of those were in flight at their peak of the last PEAK_WINDOW_MS than are now. A
   * batch beside interactive traffic so takes only what that traffic's bursts leave (issue 40:
   * the interactive tail must not wait for a batch line to end), and all of it once the
   * interactive traffic has been quiet for the window.
   */
  reserveForAbove(now: number): number {
    return Math.max(0, this.peakAbove.peak(now) - this.inflightAbove);
  }

  /** More than one tenant, or more than one priority, has been active lately: slots are kept for who is behind. */
  contended(now: number): boolean {
    const c = this.count(now);
    return c.tenants > 1 || c.priorities > 1;
  }

  /**
   * Whether the request may take a kept slot: critical, or (not sheddable) its tenant below its
   * weighted share of `slots`. Shares are among the tenants with requests above sheddable: a
   * tenant that only runs a batch takes no share from one serving users, and the requests
   * counted against a share are those above sheddable (its own batch does not use it up).
   */
  privileged(flow: FlowClass, slots: number, now: number): boolean {
    if (flow.priority >= PRIORITIES.critical) return true;
    if (flow.priority < PRIORITIES.standard) return false;
    const use = this.tenants.get(flow.tenant);
    if (use === undefined) return true;
    const weights = this.count(now).weightsAbove;
    const share = weights === 0 ? slots : (slots * use.weight) / weights;
    return use.inflightAbove < share;
  }

  /** Requests in flight of a tenant through this router (for /health). */
  inflightOf(tenant: string): number {
    return this.tenants.get(tenant)?.inflight ?? 0;
  }

  /** Who is active, counted again at most every RECOUNT_MS, or at once when someone new came. */
  private count(now: number): { tenants: number; weightsAbove: number; priorities: number } {
    const c = this.counted;
    if (now - c.at < RECOUNT_MS && now >= c.at) return c;
    let tenants = 0;
    let weightsAbove = 0;
    for (const [tenant, t] of this.tenants) {
      if (active(t, now)) {
        tenants++;
        if (t.inflightAbove > 0 || t.heldAbove > 0 || now - t.aboveSeen < ACTIVE_MS) weightsAbove += t.weight;
      }
      // Forgotten once idle, so that a key file's churn of tenants does not grow the map forever.
      else this.tenants.delete(tenant);
    }
    let priorities = 0;
    for (const [priority, at] of this.priorities) {
      if (now - at < ACTIVE_MS) priorities++;
      else this.priorities.delete(priority);
    }
    this.counted = { tenants, weightsAbove, priorities, at: now };
    return this.counted;
  }

  /** A request above sheddable of this tenant: one newly so counts again rather than answer from before. */
  private sawAbove(use: TenantUse, now: number): void {
    if (now - use.aboveSeen >= ACTIVE_MS) this.counted.at = -Infinity;
    use.aboveSeen = now;
  }

  private use(flow: FlowClass, now: number): TenantUse {
    let use = this.tenants.get(flow.tenant);
    if (use === undefined) {
      use = { weight: flow.weight, inflight: 0, held: 0, lastSeen: now, inflightAbove: 0, heldAbove: 0, aboveSeen: -Infinity };
      this.tenants.set(flow.tenant, use);
      // Someone new: the next question counts again rather than answer from before it came.
      this.counted.at = -Infinity;
    }
    // A reloaded keys file may have changed it.
    use.weight = flow.weight;
    return use;
  }
}

function active(t: TenantUse, now: number): boolean {
  return t.inflight > 0 || t.held > 0 || now - t.lastSeen < ACTIVE_MS;
}
