// The router's held line (router/flow/queue.ts) on its own: priorities leave in order, tenants
// share a priority by weight within the stated start-time fair queueing bound (checked on every
// prefix of 2,000 random steps), a quiet tenant is not stuck behind a loud one, fifo is arrival
// order, and the line gives up its newest lowest-priority request first.
import { describe, expect, it } from 'vitest';
import { ModelQueue, type Held } from '../../router/flow/queue.js';
import type { FlowClass } from '../../router/flow/priority.js';

let clock = 0;
function held(tenant: string, priority = 0, weight = 1): Held {
  const flow: FlowClass = { tenant, weight, priority };
  return {
    model: 'm',
    heldAt: ++clock,
    request: { path: `/${tenant}/${clock}`, flow },
    line: undefined,
    timer: undefined,
    tag: 0,
  } as unknown as Held;
}

function drain(q: ModelQueue): Held[] {
  const out: Held[] = [];
  for (let h = q.shift(); h !== undefined; h = q.shift()) out.push(h);
  return out;
}

describe('the held line', () => {
  it('sends every higher priority first, whatever arrived before it', () => {
    const q = new ModelQueue('m');
    q.push(held('a', -1));
    q.push(held('a', 0));
    q.push(held('b', 1));
    q.push(held('c', 0));
    q.push(held('d', 5));
    expect(drain(q).map((h) => h.request.flow.priority)).toEqual([5, 1, 0, 0, -1]);
    expect(q.size).toBe(0);
  });

  it('keeps sent/weight of two backlogged tenants within 1/w_a + 1/w_b on every prefix', () => {
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let trial = 0; trial < 20; trial++) {
      const weights = { a: 0.5 + random() * 4, b: 0.5 + random() * 4, c: 0.5 + random() * 4 };
      const q = new ModelQueue('m');
      // Every tenant backlogged throughout: more requests than the steps take.
      for (let i = 0; i < 120; i++) for (const t of ['a', 'b', 'c'] as const) q.push(held(t, 0, weights[t]));
      const sent = { a: 0, b: 0, c: 0 };
      for (let step = 0; step < 100; step++) {
        const h = q.shift() as Held;
        sent[h.request.flow.tenant as 'a' | 'b' | 'c']++;
        for (const [x, y] of [
          ['a', 'b'],
          ['a', 'c'],
          ['b', 'c'],
        ] as const) {
          const gap = Math.abs(sent[x] / weights[x] - sent[y] / weights[y]);
          expect(gap).toBeLessThanOrEqual(1 / weights[x] + 1 / weights[y] + 1e-9);
        }
      }
    }
  });

  it('gives weights 3:1 shares of 3:1 while both wait', () => {
    const q = new ModelQueue('m');
    for (let i = 0; i < 400; i++) {
      q.push(held('big', 0, 3));
      q.push(held('small', 0, 1));
    }
    const first = Array.from({ length: 400 }, () => q.shift() as Held);
    const big = first.filter((h) => h.request.flow.tenant === 'big').length;
    expect(big).toBe(300);
  });

  it('sends a quiet tenant’s request next, not behind a loud tenant’s backlog', () => {
    const q = new ModelQueue('m');
    for (let i = 0; i < 50; i++) q.push(held('loud'));
    for (let i = 0; i < 10; i++) q.shift();
    const quiet = held('quiet');
    q.push(quiet);
    // At most one of the loud tenant's goes first (the one whose turn it is).
    const next = [q.shift(), q.shift()];
    expect(next).toContain(quiet);
  });

  it('counts ahead of a quiet tenant only what its stamp would follow, not a loud tenant’s whole backlog', () => {
    const q = new ModelQueue('m');
    for (let i = 0; i < 100; i++) q.push(held('loud'));
    // Only the loud request whose turn it is (an equal stamp, held first).
    expect(q.aheadOf({ tenant: 'quiet', weight: 1, priority: 0 })).toBe(1);
    expect(q.aheadOf({ tenant: 'loud', weight: 1, priority: 0 })).toBe(100);
    q.push(held('quiet'));
    expect(q.aheadOf({ tenant: 'quiet', weight: 1, priority: 0 })).toBe(3);
    expect(q.aheadOf({ tenant: 'ops', weight: 1, priority: -1 })).toBe(101);
  });

  it('gives a tenant back the time of requests that left unsent, so it is not pushed behind', () => {
    const q = new ModelQueue('m');
    const gone = Array.from({ length: 10 }, () => held('b'));
    for (const h of gone) q.push(h);
    for (let i = 0; i < 20; i++) q.push(held('a'));
    for (const h of gone) expect(q.remove(h)).toBe(true);
    const next = held('b');
    q.push(next);
    // Without the refund b's next request would follow ten of a's.
    expect([q.shift(), q.shift()]).toContain(next);
  });

  it('with fifo, serves one priority in arrival order whatever the tenants', () => {
    const q = new ModelQueue('m', 'fifo');
    const order = [held('loud'), held('loud'), held('loud'), held('quiet'), held('loud')];
    for (const h of order) q.push(h);
    expect(drain(q)).toEqual(order);
  });

  it('picks among the eligible only, highest priority first, and forgets a removed request', () => {
    const q = new ModelQueue('m');
    const a = held('a', 0);
    const b = held('b', 0);
    const c = held('c', -1);
    for (const h of [a, b, c]) q.push(h);
    expect(q.shiftWhere((flow) => flow.tenant !== 'a')).toBe(b);
    expect(q.remove(a)).toBe(true);
    expect(q.remove(a)).toBe(false);
    expect(q.aheadOf({ tenant: 'd', weight: 1, priority: 0 })).toBe(0);
    expect(q.aheadOf({ tenant: 'd', weight: 1, priority: -1 })).toBe(1);
    expect(q.shiftWhere((flow) => flow.priority > 0)).toBeUndefined();
    expect(drain(q)).toEqual([c]);
  });

  it('gives up the newest request of the lowest priority first, and reports what it holds by class', () => {
    const q = new ModelQueue('m');
    const older = held('batch', -1);
    const newer = held('batch', -1);
    q.push(held('chat', 1));
    q.push(older);
    q.push(newer);
    q.push(held('chat', 0));
    expect(q.lowest()).toBe(newer);
    expect(q.classes()).toEqual(
      expect.arrayContaining([
        { tenant: 'chat', priority: 1, held: 1 },
        { tenant: 'chat', priority: 0, held: 1 },
        { tenant: 'batch', priority: -1, held: 2 },
      ]),
    );
    expect(q.oldest()).toBeDefined();
  });
});
