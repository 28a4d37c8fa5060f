// Who is using a deployment through this router process, for flow control: each tenant's
// requests in flight, its weight, and when it was last seen; each priority's last sighting. From
// them, whether the deployment is contended (more than one tenant or priority active) and whether
// a tenant is below its weighted share of the deployment's slots, which lets it take the slots
// kept free (flow/room.ts). Router side; one per model line (flow/queue.ts), pure bookkeeping.
import { PRIORITIES, type FlowClass } from './priority.js';

/** A tenant or priority seen this recently is still active: a chat user between two turns is. */
export const ACTIVE_MS = 5000;

interface TenantUse {
  weight: number;
  inflight: number;
  /** Requests of it held in the line. */
  held: number;
  lastSeen: number;
}

/** How long a count of who is active is used before it is made again: admission must not walk every tenant per request. */
const RECOUNT_MS = 100;

export class TenantShares {
  private readonly tenants = new Map<string, TenantUse>();
  private readonly priorities = new Map<number, number>();
  /** The last count: active tenants, their weights, active priorities, and when it was made. */
  private counted = { tenants: 0, weights: 0, priorities: 0, at: -Infinity };

  /** A request of this class arrived (held or sent). */
  seen(flow: FlowClass, now: number): void {
    const use = this.use(flow, now);
    use.lastSeen = now;
    if (!this.priorities.has(flow.priority)) this.counted.at = -Infinity;
    this.priorities.set(flow.priority, now);
  }

  held(flow: FlowClass, delta: 1 | -1, now: number): void {
    const use = this.use(flow, now);
    use.held += delta;
    use.lastSeen = now;
  }

  started(flow: FlowClass, now: number): void {
    const use = this.use(flow, now);
    use.inflight++;
    use.lastSeen = now;
  }

  finished(flow: FlowClass, now: number): void {
    const use = this.tenants.get(flow.tenant);
    if (use === undefined) return;
    use.inflight = Math.max(0, use.inflight - 1);
    use.lastSeen = now;
  }

  /** More than one tenant, or more than one priority, has been active lately: slots are kept for who is behind. */
  contended(now: number): boolean {
    const c = this.count(now);
    return c.tenants > 1 || c.priorities > 1;
  }

  /** Whether the request may take a kept slot: critical, or (not sheddable) its tenant below its weighted share of `slots`. */
  privileged(flow: FlowClass, slots: number, now: number): boolean {
    if (flow.priority >= PRIORITIES.critical) return true;
    if (flow.priority < PRIORITIES.standard) return false;
    const use = this.tenants.get(flow.tenant);
    if (use === undefined) return true;
    const weights = this.count(now).weights;
    const share = weights === 0 ? slots : (slots * use.weight) / weights;
    return use.inflight < share;
  }

  /** Requests in flight of a tenant through this router (for /health). */
  inflightOf(tenant: string): number {
    return this.tenants.get(tenant)?.inflight ?? 0;
  }

  /** Who is active, counted again at most every RECOUNT_MS, or at once when someone new came. */
  private count(now: number): { tenants: number; weights: number; priorities: number } {
    const c = this.counted;
    if (now - c.at < RECOUNT_MS && now >= c.at) return c;
    let tenants = 0;
    let weights = 0;
    for (const [tenant, t] of this.tenants) {
      if (active(t, now)) {
        tenants++;
        weights += t.weight;
      }
      // Forgotten once idle, so that a key file's churn of tenants does not grow the map forever.
      else this.tenants.delete(tenant);
    }
    let priorities = 0;
    for (const [priority, at] of this.priorities) {
      if (now - at < ACTIVE_MS) priorities++;
      else this.priorities.delete(priority);
    }
    this.counted = { tenants, weights, priorities, at: now };
    return this.counted;
  }

  private use(flow: FlowClass, now: number): TenantUse {
    let use = this.tenants.get(flow.tenant);
    if (use === undefined) {
      use = { weight: flow.weight, inflight: 0, held: 0, lastSeen: now };
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
