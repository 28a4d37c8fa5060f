// A model's waiting line at the router: requests held while it has no routable replica (scaled to
// zero, starting, asleep) or while every replica is saturated. Ordered by priority first (a
// higher one always leaves first), then, within a priority, weighted-fair across tenants by
// start-time fair queueing: each request is stamped with a virtual start time, its tenant's
// previous finish or the line's clock if later, and finishes 1/weight after it; the smallest
// stamp leaves first. Whenever two tenants both have requests waiting at a priority, the
// requests each has been sent, divided by its weight, differ by at most 1/w_a + 1/w_b (Goyal et
// al., SFQ). With fairness `fifo`, every request is one tenant's: first come first served
// within a priority. Router side; the waiting room (flow/waiting-room.ts) decides when a request
// joins and leaves.
import type { ExchangeResponse, RoutedRequest } from '../engines/routed-request.js';
import type { FlowClass } from './priority.js';
import { TenantShares } from './tenant-shares.js';

/** Why a request was held: no replica to send it to, every one asleep (being woken), or every replica's engine has a line. */
export type HoldReason = 'no_replica' | 'sleeping' | 'saturated';

/** How requests of one priority share the line: by tenant weight, or in arrival order. */
export type Fairness = 'weighted' | 'fifo';

/** A request waiting at the router: everything needed to send it once a replica can take it. */
export interface Held {
  /** The served name it waits for. */
  model: string;
  res: ExchangeResponse;
  /** What it will be sent as. */
  request: RoutedRequest;
  /** When it joined the line (performance.now()). */
  heldAt: number;
  reason: HoldReason;
  timer: NodeJS.Timeout | undefined;
  /** The line it waits in; undefined once it has left. */
  line: ModelQueue | undefined;
  /** Its virtual start time in its priority's fair queue. */
  tag: number;
  /** The virtual time it was charged (1/weight): given back to its tenant if it leaves unsent. */
  cost: number;
}

interface TenantLine {
  readonly items: Held[];
  /** The virtual finish time of its last request stamped. */
  lastFinish: number;
}

/** One priority's requests, by tenant. */
interface Level {
  readonly priority: number;
  readonly tenants: Map<string, TenantLine>;
  /** The line's virtual clock: the stamp of the last request that left. */
  clock: number;
  size: number;
}

/** What is held of one tenant at one priority (for /health and metrics). */
export interface HeldClass {
  tenant: string;
  priority: number;
  held: number;
}

export class ModelQueue {
  /** By priority, highest first. */
  private levels: Level[] = [];
  size = 0;
  /** Who uses the model through this router: what kept slots are given by (flow/room.ts). */
  readonly shares = new TenantShares();

  constructor(
    readonly model: string,
    public fairness: Fairness = 'weighted',
  ) {}

  push(held: Held): void {
    const flow = held.request.flow;
    const level = this.levelOf(flow.priority);
    const tenant = this.tenantKey(flow);
    let line = level.tenants.get(tenant);
    if (line === undefined) {
      line = { items: [], lastFinish: 0 };
      level.tenants.set(tenant, line);
    }
    const weight = this.fairness === 'fifo' ? 1 : flow.weight;
    held.tag = this.stampFor(level, flow);
    held.cost = 1 / weight;
    line.lastFinish = held.tag + held.cost;
    line.items.push(held);
    held.line = this;
    level.size++;
    this.size++;
    this.shares.held(flow, 1, performance.now());
  }

  /** The next request to send: the smallest stamp of the highest priority. */
  shift(): Held | undefined {
    return this.shiftWhere(undefined);
  }

  /** The next request to send among those `eligible` allows, highest priority first; undefined when none is. */
  shiftWhere(eligible: ((flow: FlowClass) => boolean) | undefined): Held | undefined {
    for (const level of this.levels) {
      let best: TenantLine | undefined;
      for (const line of level.tenants.values()) {
        const head = line.items[0];
        if (head === undefined) continue;
        if (eligible !== undefined && !eligible(head.request.flow)) continue;
        const bestHead = best?.items[0];
        if (bestHead === undefined || head.tag < bestHead.tag || (head.tag === bestHead.tag && head.heldAt < bestHead.heldAt)) best = line;
      }
      if (best === undefined) continue;
      const held = best.items[0] as Held;
      level.clock = held.tag;
      this.take(level, held);
      return held;
    }
    return undefined;
  }

  /** The request the line gives up first when it is full: the newest of the lowest priority. */
  lowest(): Held | undefined {
    const level = this.levels[this.levels.length - 1];
    return level === undefined ? undefined : newestOf(level);
  }

  /**
   * What a full line gives up for a newcomer of `flow`; undefined when the newcomer is the one
   * refused. The newest of a lower priority, the lowest first; at the newcomer's own priority
   * (weighted fairness), the newest of the tenant holding the most of the line per weight, when
   * that is more than the newcomer's tenant would hold with it: else a tenant sending ten times
   * as much fills the line and a quiet tenant, though below its share, gets only refusals.
   */
  victimFor(flow: FlowClass): Held | undefined {
    const level = this.levels[this.levels.length - 1];
    if (level === undefined || level.priority > flow.priority) return undefined;
    if (level.priority < flow.priority) return newestOf(level);
    if (this.fairness === 'fifo') return undefined;
    let heaviest: TenantLine | undefined;
    let most = 0;
    for (const line of level.tenants.values()) {
      const last = line.items[line.items.length - 1];
      if (last === undefined) continue;
      const load = line.items.length / last.request.flow.weight;
      if (load > most) {
        most = load;
        heaviest = line;
      }
    }
    const own = level.tenants.get(this.tenantKey(flow));
    const ownLoad = ((own?.items.length ?? 0) + 1) / flow.weight;
    if (heaviest === undefined || heaviest === own || most <= ownLoad) return undefined;
    return heaviest.items[heaviest.items.length - 1];
  }

  /** Takes a request out wherever it is (its client left, it waited too long, or it is shed). */
  remove(held: Held): boolean {
    if (held.line !== this) return false;
    const level = this.levels.find((l) => l.priority === held.request.flow.priority);
    if (level === undefined) return false;
    this.take(level, held, true);
    return true;
  }

  /** The oldest heldAt of any request waiting, or undefined. */
  oldest(): number | undefined {
    let oldest: number | undefined;
    for (const level of this.levels)
      for (const line of level.tenants.values()) {
        const head = line.items[0];
        if (head !== undefined && (oldest === undefined || head.heldAt < oldest)) oldest = head.heldAt;
      }
    return oldest;
  }

  /**
   * Requests that would leave before one of this class arriving now: every one of a higher
   * priority, and of its own those stamped no later than it would be. Under weighted fairness a
   * tenant below its share goes ahead of another's backlog, so counting the whole level would
   * predict it a wait it does not have (and refuse a deadline it would meet). `eligible`: only
   * requests of classes it allows (those that may take the slots free now).
   */
  aheadOf(flow: FlowClass, eligible?: (flow: FlowClass) => boolean): number {
    let n = 0;
    for (const level of this.levels) {
      if (level.priority < flow.priority) break;
      const tag = level.priority > flow.priority || this.fairness === 'fifo' ? Infinity : this.stampFor(level, flow);
      n += eligible === undefined && tag === Infinity ? level.size : stampedBy(level, tag, eligible);
    }
    return n;
  }

  /** What is held, by tenant and priority. */
  classes(): HeldClass[] {
    const out: HeldClass[] = [];
    for (const level of this.levels) {
      if (this.fairness !== 'fifo') {
        for (const [tenant, line] of level.tenants) out.push({ tenant, priority: level.priority, held: line.items.length });
        continue;
      }
      // First come first served keeps one line for every tenant: counted by each request's own.
      const byTenant = new Map<string, number>();
      for (const line of level.tenants.values())
        for (const held of line.items) byTenant.set(held.request.flow.tenant, (byTenant.get(held.request.flow.tenant) ?? 0) + 1);
      for (const [tenant, held] of byTenant) out.push({ tenant, priority: level.priority, held });
    }
    return out;
  }

  /** Empties the line, handing back everything that waited. */
  takeAll(): Held[] {
    const all: Held[] = [];
    for (let h = this.shift(); h !== undefined; h = this.shift()) all.push(h);
    return all;
  }

  /** Takes `held` off its level; `unsent`: it leaves without being sent, and its tenant gets its time back. */
  private take(level: Level, held: Held, unsent = false): void {
    const key = this.tenantKey(held.request.flow);
    const line = level.tenants.get(key);
    const i = line?.items.indexOf(held) ?? -1;
    if (line === undefined || i < 0) return;
    line.items.splice(i, 1);
    if (unsent) {
      // Else a tenant whose requests keep timing out would fall further behind each time.
      for (let j = i; j < line.items.length; j++) (line.items[j] as Held).tag -= held.cost;
      line.lastFinish = Math.max(level.clock, line.lastFinish - held.cost);
    }
    // A tenant's line is kept while empty for its last finish stamp, unless the level empties.
    if (line.items.length === 0 && line.lastFinish <= level.clock) level.tenants.delete(key);
    held.line = undefined;
    level.size--;
    this.size--;
    if (level.size === 0) this.levels = this.levels.filter((l) => l !== level);
    this.shares.held(held.request.flow, -1, performance.now());
  }

  /** The virtual start time a request of `flow` joining `level` now is stamped with. */
  private stampFor(level: Level, flow: FlowClass): number {
    return Math.max(level.clock, level.tenants.get(this.tenantKey(flow))?.lastFinish ?? 0);
  }

  private tenantKey(flow: FlowClass): string {
    return this.fairness === 'fifo' ? '' : flow.tenant;
  }

  private levelOf(priority: number): Level {
    let level = this.levels.find((l) => l.priority === priority);
    if (level === undefined) {
      level = { priority, tenants: new Map(), clock: 0, size: 0 };
      this.levels = [...this.levels, level].sort((a, b) => b.priority - a.priority);
    }
    return level;
  }
}

function newestOf(level: Level): Held | undefined {
  let newest: Held | undefined;
  for (const line of level.tenants.values()) {
    const last = line.items[line.items.length - 1];
    if (last !== undefined && (newest === undefined || last.heldAt > newest.heldAt)) newest = last;
  }
  return newest;
}

/** Requests of `level` stamped no later than `tag` (each tenant's are in stamp order), of classes `eligible` allows. */
function stampedBy(level: Level, tag: number, eligible: ((flow: FlowClass) => boolean) | undefined): number {
  let n = 0;
  for (const line of level.tenants.values()) {
    for (const held of line.items) {
      if (held.tag > tag) break;
      if (eligible === undefined || eligible(held.request.flow)) n++;
    }
  }
  return n;
}
