// The router's waiting line (router/flow/queue.ts) on its own: which request a full line gives up
// for a newcomer (a lower priority first, then the tenant holding the most of the line for its
// weight), and how many requests a newcomer would wait behind (what a deadline's prediction uses).
import { describe, expect, it } from 'vitest';
import type { ExchangeResponse, RoutedRequest } from '../../router/engines/routed-request.js';
import type { FlowClass } from '../../router/flow/priority.js';
import { ModelQueue, type Fairness, type Held } from '../../router/flow/queue.js';

let clock = 0;
function held(flow: FlowClass): Held {
  return {
    model: 'm',
    res: {} as ExchangeResponse,
    request: { flow } as RoutedRequest,
    heldAt: ++clock,
    reason: 'saturated',
    timer: undefined,
    line: undefined,
    tag: 0,
    cost: 0,
  };
}
const flow = (tenant: string, priority = 0, weight = 1): FlowClass => ({ tenant, weight, priority });

function line(fairness: Fairness, entries: Array<[FlowClass, number]>): { q: ModelQueue; all: Held[] } {
  const q = new ModelQueue('m', fairness);
  const all: Held[] = [];
  for (const [f, n] of entries)
    for (let i = 0; i < n; i++) {
      const h = held(f);
      q.push(h);
      all.push(h);
    }
  return { q, all };
}

describe('a full line', () => {
  it('gives up the heavy tenant’s newest for a quiet tenant at the same priority (weighted)', () => {
    const { q, all } = line('weighted', [
      [flow('heavy'), 8],
      [flow('quiet'), 1],
    ]);
    const newestHeavy = all[7];
    expect(q.victimFor(flow('quiet'))).toBe(newestHeavy);
    // The heavy tenant itself is refused, not another of its own taken out.
    expect(q.victimFor(flow('heavy'))).toBeUndefined();
  });

  it('weighs what each tenant holds: a weight-3 tenant may hold three times as much', () => {
    const { q } = line('weighted', [
      [flow('big', 0, 3), 6],
      [flow('small', 0, 1), 2],
    ]);
    // small would hold 3 (per weight 3) against big's 6 / 3 = 2: it is refused.
    expect(q.victimFor(flow('small', 0, 1))).toBeUndefined();
    expect(q.victimFor(flow('new', 0, 1))?.request.flow.tenant).toBe('big');
  });

  it('gives up a lower priority first, and never a higher one', () => {
    const { q, all } = line('weighted', [
      [flow('a', 0), 4],
      [flow('s', -1), 2],
    ]);
    expect(q.victimFor(flow('q', 0))).toBe(all[5]);
    expect(q.victimFor(flow('q', -2))).toBeUndefined();
  });

  it('with fifo, refuses the newcomer at its own priority as before', () => {
    const { q } = line('fifo', [[flow('heavy'), 8]]);
    expect(q.victimFor(flow('quiet'))).toBeUndefined();
  });
});

describe('requests ahead of a newcomer', () => {
  it('under weighted fairness, counts only those that leave before it', () => {
    const { q } = line('weighted', [[flow('heavy'), 30]]);
    // A quiet tenant's first request is stamped with the line's clock: only heavy's head goes first.
    expect(q.aheadOf(flow('quiet'))).toBe(1);
    expect(q.aheadOf(flow('heavy'))).toBe(30);
    expect(q.aheadOf(flow('boss', 1))).toBe(0);
    expect(q.aheadOf(flow('low', -1))).toBe(30);
  });

  it('counts only the classes allowed, at every priority at or above its own', () => {
    const { q } = line('weighted', [
      [flow('boss', 1), 2],
      [flow('heavy'), 30],
      [flow('other'), 3],
    ]);
    const notHeavy = (f: FlowClass) => f.tenant !== 'heavy';
    // Of its own level only other's head is stamped before quiet's first; boss's two are above it.
    expect(q.aheadOf(flow('quiet'), notHeavy)).toBe(3);
    expect(q.aheadOf(flow('quiet'))).toBe(4);
  });

  it('with fifo, counts the whole level', () => {
    const { q } = line('fifo', [[flow('heavy'), 30]]);
    expect(q.aheadOf(flow('quiet'))).toBe(30);
  });
});
