// Flow control's pure parts: priorities as written in a keys file and a request's header (lower
// only), tenants and weights read from a keys file (one weight per tenant), who may take the
// slots kept free while a deployment is contended, and the time-to-first-token prediction that
// deadlines are judged by.
import { describe, expect, it } from 'vitest';
import { ApiKeys, parseKeyEntry, parseKeyLine } from '../../router/http/auth.js';
import { parsePriority, priorityLabel, requestClass } from '../../router/flow/priority.js';
import { TenantShares, ACTIVE_MS } from '../../router/flow/tenant-shares.js';
import { contentionOf, hasRoom, keptSlots, standingOf, type Roomy } from '../../router/flow/room.js';
import { PEAK_WINDOW_MS, WindowPeak } from '../../router/flow/window-peak.js';
import { meeting, parseDeadline, predictLineMs, predictTtftMs, type Predictable } from '../../router/flow/deadline.js';
import { DEFAULT_COSTS } from '../../router/policies/policy.js';
import { Endpoint } from '../../router/engines/endpoint.js';
import type { Pool } from 'undici';

describe('priorities', () => {
  it('reads names and integers, and says what is allowed otherwise', () => {
    expect(parsePriority('critical')).toBe(1);
    expect(parsePriority('Sheddable')).toBe(-1);
    expect(parsePriority('-5')).toBe(-5);
    expect(parsePriority(7)).toBe(7);
    expect(String(parsePriority('urgent'))).toMatch(/not one of critical, standard, sheddable or an integer/);
    expect(parsePriority(1000)).toBeInstanceOf(Error);
    expect(priorityLabel(0)).toBe('standard');
    expect(priorityLabel(3)).toBe('3');
  });

  it('lets a request lower its priority, never raise it above its key’s', () => {
    const key = { tenant: 't', weight: 2, priority: 0 };
    expect(requestClass(key, 'sheddable')).toEqual({ ...key, priority: -1 });
    expect(requestClass(key, 'critical')).toEqual(key);
    expect(requestClass(undefined, 'critical')).toMatchObject({ priority: 0 });
    expect(requestClass(key, 'soon')).toBeInstanceOf(Error);
  });
});

describe('tenants in the keys file', () => {
  it('reads tenant, weight and priority in both forms, never naming the key in an error', () => {
    expect(parseKeyLine('sk-one tenant=team-a weight=3 priority=critical')).toMatchObject({ tenant: 'team-a', weight: 3, priority: 1 });
    expect(parseKeyEntry('{"key":"sk-two","tenant":"team-b","priority":"sheddable"}')).toMatchObject({ tenant: 'team-b', priority: -1 });
    expect(() => parseKeyLine('sk-three weight=2')).toThrow(/name the tenant too/);
    expect(() => parseKeyEntry('{"key":"sk-four","tenant":"t","weight":0}')).toThrow(/weight must be > 0/);
    expect(() => parseKeyEntry('{"key":"sk-five","priority":"soon"}')).toThrow(/priority `soon` is not one of/);
    expect(() => parseKeyEntry('{"key":"sk-six","tenant":"sk-six"}')).toThrow(/tenant must not be the key/);
  });

  it('gives a tenant’s keys its one weight, each key its own priority, and refuses two weights for one tenant', () => {
    const keys = new ApiKeys([
      { key: 'sk-a1', tenant: 'a', weight: 3, priority: 1 },
      { key: 'sk-a2', tenant: 'a' },
      { key: 'sk-b', id: 'bee' },
    ]);
    expect(keys.keys.map((k) => k.flow)).toEqual([
      { tenant: 'a', weight: 3, priority: 1 },
      { tenant: 'a', weight: 3, priority: 0 },
      { tenant: 'bee', weight: 1, priority: 0 },
    ]);
    expect(
      () =>
        new ApiKeys([
          { key: 'sk-x', tenant: 'a', weight: 3, where: 'keys:1' },
          { key: 'sk-y', tenant: 'a', weight: 2, where: 'keys:4' },
        ]),
    ).toThrow('keys:4: tenant a has weight 3 at keys:1; a tenant has one weight');
  });
});

function engine(free: number, slots: number, costs: Partial<typeof DEFAULT_COSTS> = {}, prefilling = 0, inflight = 1): Roomy & Predictable {
  return { freeSlots: () => free, concurrency: () => slots, costs: { ...DEFAULT_COSTS, ...costs }, prefilling, inflight };
}

describe('kept slots', () => {
  const settings = { saturatedWaiting: 8, keptShare: 0.125 };

  it('keeps none while one tenant and one priority are active, and lets the engine’s line grow to the threshold', () => {
    const shares = new TenantShares();
    shares.seen({ tenant: 'a', weight: 1, priority: 0 }, 0);
    const c = contentionOf(shares, [engine(0, 16)], 1);
    expect(c).toEqual({ contended: false, slots: 16, now: 1, reserve: 0 });
    expect(hasRoom(engine(-7, 16), settings, c, 'open')).toBe(true);
    expect(hasRoom(engine(-8, 16), settings, c, 'open')).toBe(false);
  });

  it('while contended, sends only to free slots and keeps 1/8 of them for critical requests and tenants below their share', () => {
    const shares = new TenantShares();
    const loud = { tenant: 'loud', weight: 1, priority: 0 };
    const quiet = { tenant: 'quiet', weight: 1, priority: 0 };
    const critical = { tenant: 'ops', weight: 1, priority: 1 };
    for (let i = 0; i < 14; i++) shares.started(loud, 0);
    shares.seen(quiet, 0);
    const c = contentionOf(shares, [engine(2, 16)], 1);
    expect(c.contended).toBe(true);
    expect(keptSlots(engine(2, 16), 0.125)).toBe(2);
    // Loud holds 14 of 16 slots, over its half: the last two free slots are not for it.
    expect(shares.privileged(loud, c.slots, 1)).toBe(false);
    expect(shares.privileged(quiet, c.slots, 1)).toBe(true);
    expect(shares.privileged(critical, c.slots, 1)).toBe(true);
    expect(shares.privileged({ ...quiet, priority: -1 }, c.slots, 1)).toBe(false);
    expect(hasRoom(engine(2, 16), settings, c, 'open')).toBe(false);
    expect(hasRoom(engine(2, 16), settings, c, 'kept')).toBe(true);
    expect(hasRoom(engine(0, 16), settings, c, 'kept')).toBe(false);
    expect(hasRoom(engine(3, 16), settings, c, 'open')).toBe(true);
    // An engine whose line is all other routers' (that may see no contention and keep it full)
    // is held to the uncontended rule by a router with nothing there, so it is never starved.
    expect(hasRoom(engine(-3, 16, {}, 0, 0), settings, c, 'open')).toBe(true);
    expect(hasRoom(engine(-8, 16, {}, 0, 0), settings, c, 'kept')).toBe(false);
  });

  it('shares the slots among tenants above sheddable: a batch-only tenant takes no share from one serving users', () => {
    const shares = new TenantShares();
    const users = { tenant: 'users', weight: 1, priority: 0 };
    const batch = { tenant: 'batch', weight: 1, priority: -1 };
    for (let i = 0; i < 10; i++) shares.started(users, 0);
    for (let i = 0; i < 4; i++) shares.started(batch, 0);
    const c = contentionOf(shares, [engine(2, 16)], 1);
    expect(c.contended).toBe(true);
    // Ten of sixteen, over half: still below its share, since the batch tenant has none.
    expect(standingOf(shares, users, c)).toBe('kept');
    expect(standingOf(shares, batch, c)).toBe('spare');
    // A second tenant serving users halves it.
    shares.seen({ tenant: 'other', weight: 1, priority: 0 }, 2);
    expect(standingOf(shares, users, contentionOf(shares, [engine(2, 16)], 200))).toBe('open');
  });

  it('has sheddable requests leave the slots the requests above them needed at their recent peak', () => {
    const shares = new TenantShares();
    const users = { tenant: 'users', weight: 1, priority: 0 };
    const batch = { tenant: 'batch', weight: 1, priority: -1 };
    shares.started(batch, 0);
    for (let i = 0; i < 10; i++) shares.started(users, 0);
    for (let i = 0; i < 5; i++) shares.finished(users, 500);
    // Five in flight now, ten at the peak: five more kept for them beyond the two kept slots.
    const c = contentionOf(shares, [engine(7, 16)], 1000);
    expect(c.reserve).toBe(5);
    expect(hasRoom(engine(7, 16), settings, c, 'spare')).toBe(false);
    expect(hasRoom(engine(8, 16), settings, c, 'spare')).toBe(true);
    expect(hasRoom(engine(3, 16), settings, c, 'open')).toBe(true);
    // Two replicas of 16: each keeps its half of the reserve, rounded down (2 of 5).
    const two = contentionOf(shares, [engine(5, 16), engine(5, 16)], 1000);
    expect(hasRoom(engine(4, 16), settings, two, 'spare')).toBe(false);
    expect(hasRoom(engine(5, 16), settings, two, 'spare')).toBe(true);
    // The peak is forgotten once the window has passed: the batch gets the slots back.
    expect(shares.reserveForAbove(500 + PEAK_WINDOW_MS + 1000)).toBe(0);
  });

  it('keeps the share of a tenant whose requests wait in the line longer than the active window', () => {
    const shares = new TenantShares();
    const loud = { tenant: 'loud', weight: 1, priority: 0 };
    const waiting = { tenant: 'waiting', weight: 1, priority: 0 };
    for (let i = 0; i < 10; i++) shares.started(loud, 0);
    shares.seen(waiting, 0);
    shares.held(waiting, 1, 0);
    // Six seconds on, still held: loud (10 of 16) stays over its half and may not take kept slots.
    for (let i = 0; i < 10; i++) {
      shares.finished(loud, 6000);
      shares.started(loud, 6000);
    }
    expect(shares.privileged(loud, 16, 6000)).toBe(false);
    shares.held(waiting, -1, 6001);
    expect(shares.privileged(loud, 16, 6001 + ACTIVE_MS)).toBe(true);
  });

  it('forgets a tenant idle for longer than the active window', () => {
    const shares = new TenantShares();
    shares.seen({ tenant: 'a', weight: 1, priority: 0 }, 0);
    shares.seen({ tenant: 'b', weight: 1, priority: 0 }, 0);
    expect(shares.contended(1)).toBe(true);
    expect(shares.contended(ACTIVE_MS + 1)).toBe(false);
  });
});

describe('a peak over a window', () => {
  it('remembers the highest count of the last window, counts that held through quiet seconds included', () => {
    const p = new WindowPeak();
    p.note(3, 0);
    p.note(9, 100);
    p.note(4, 200);
    expect(p.peak(5000)).toBe(9);
    // Nothing noted for the window: the count that held through it (4) is the peak.
    expect(p.peak(200 + PEAK_WINDOW_MS + 1000)).toBe(4);
    p.note(0, 200 + PEAK_WINDOW_MS + 1500);
    expect(p.peak(200 + 2 * PEAK_WINDOW_MS + 2000)).toBe(0);
  });
});

describe('an engine’s capacity', () => {
  it('is not learned from a line with nothing running (a capacity of 0 would hold everything back)', () => {
    const e = new Endpoint('http://engine:1', {} as Pool);
    e.probeSucceeded(0, { running: 0, waiting: 3, kvUsage: 0 });
    expect(e.concurrency()).toBeNaN();
    expect(e.freeSlots()).toBe(Infinity);
    // Six of this router's there, four running: it runs four.
    e.inflight = 6;
    e.probeSucceeded(0, { running: 4, waiting: 2, kvUsage: 0.5 });
    expect(e.concurrency()).toBe(4);
    // This router's live count, not the scrape's: one sent since is one more in the line.
    e.inflight = 7;
    expect(e.freeSlots()).toBe(-3);
  });
});

describe('deadlines', () => {
  it('reads milliseconds and refuses what is not', () => {
    expect(parseDeadline({})).toBeUndefined();
    expect(parseDeadline({ 'x-llmgw-slo-ttft-ms': '250' })).toEqual({ ttftMs: 250, tpotMs: undefined });
    expect(String(parseDeadline({ 'x-llmgw-slo-tpot-ms': 'soon' }))).toMatch(/x-llmgw-slo-tpot-ms must be a number of milliseconds/);
  });

  it('predicts the wait for a slot, the prefills ahead, its own prefill and one decode step', () => {
    const costs = { serviceMs: 1600, prefillMs: 10, prefillMsPerToken: 0.1, bytesPerToken: 4, tpotMs: 20 };
    // A free slot, one prefill ahead, 4,000 bytes = 1,000 tokens.
    expect(predictTtftMs(engine(3, 16, costs, 1), 4000)).toBeCloseTo(10 + 100 + 20);
    // Two waiting ahead: three slots must free, one every 100 ms.
    expect(predictTtftMs(engine(-2, 16, costs, 2), 4000)).toBeCloseTo(300 + 100 + 20);
    // Ten held ahead at the router, two replicas of 16 slots each freeing one every 100 ms.
    expect(predictLineMs(10, [engine(0, 16, costs), engine(0, 16, costs)])).toBeCloseTo(500);
  });

  it('keeps the replicas predicted to meet a deadline, quoting the best prediction', () => {
    const fast = engine(4, 16, { serviceMs: 1000, tpotMs: 10 });
    const slow = engine(-10, 16, { serviceMs: 1000, tpotMs: 50 });
    const verdict = meeting({ ttftMs: 200, tpotMs: 30 }, [fast, slow], 400, 0);
    expect(verdict.meets).toEqual([fast]);
    expect(verdict.bestTpotMs).toBe(10);
    expect(meeting({ ttftMs: 5, tpotMs: undefined }, [fast, slow], 400, 0).meets).toEqual([]);
  });
});
