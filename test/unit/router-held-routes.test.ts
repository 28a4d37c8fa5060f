// The router's hold on routes Temporal forgot (router/routes/held.ts): what is held, what leaves
// at once, and what ends a hold. A scripted inner source and a scripted health probe.
import { describe, expect, it } from 'vitest';
import { HoldingRouteSource } from '../../router/routes/held.js';
import type { RouteEntry, RouteSnapshot, RouteSource } from '../../router/routes/table.js';
import type { ReplicaPhase } from '../../common/replica-types.js';

/** Hands over the tables it is given, one per fetch, in order. */
class ScriptedSource implements RouteSource {
  readonly description = 'scripted';
  readonly longPoll = true;
  private readonly queue: RouteSnapshot[] = [];
  private waiter: ((s: RouteSnapshot) => void) | undefined;

  push(snapshot: RouteSnapshot): void {
    if (this.waiter) {
      this.waiter(snapshot);
      this.waiter = undefined;
    } else this.queue.push(snapshot);
  }

  fetch(): Promise<RouteSnapshot> {
    const next = this.queue.shift();
    if (next) return Promise.resolve(next);
    return new Promise((resolve) => (this.waiter = resolve));
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

const route = (n: number, phase: ReplicaPhase = 'Ready'): RouteEntry => ({
  replicaId: `replica/demo/${n}`,
  deployment: 'demo',
  servedName: 'demo',
  endpoint: `http://127.0.0.1:${18000 + n}`,
  phase,
});
const table = (epoch: string | undefined, ...routes: RouteEntry[]): RouteSnapshot => ({
  routes,
  deployments: [],
  ...(epoch ? { epoch } : {}),
});
const endpoints = (s: RouteSnapshot) => s.routes.map((r) => `${r.endpoint}:${r.phase}`).sort();

function holding(alive: Set<string>, opts: { maxHoldMs?: number } = {}) {
  const inner = new ScriptedSource();
  const logs: string[] = [];
  const source = new HoldingRouteSource(inner, {
    checkIntervalMs: 20,
    failuresToDrop: 2,
    ...opts,
    log: (l) => logs.push(l),
    probe: (endpoint) => Promise.resolve(alive.has(endpoint)),
  });
  return { inner, source, logs };
}

describe('routes Temporal forgot', () => {
  it('holds the routes a routes workflow started afresh forgot, while their engines answer, until Temporal lists them again', async () => {
    const alive = new Set([route(1).endpoint, route(2).endpoint]);
    const { inner, source, logs } = holding(alive);
    inner.push(table('e1', route(1), route(2)));
    expect(endpoints(await source.fetch())).toHaveLength(2);

    // Temporal lost its data: a new epoch with nothing in it.
    inner.push(table('e2'));
    const held = await source.fetch();
    expect(endpoints(held)).toEqual([`${route(1).endpoint}:Ready`, `${route(2).endpoint}:Ready`]);
    expect(held.held?.map((h) => h.replicaId)).toEqual(['replica/demo/1', 'replica/demo/2']);
    expect(logs.join('\n')).toMatch(/holding demo → http:\/\/127\.0\.0\.1:18001.*started afresh/);

    // Reconciliation adopts replica 1 (Temporal lists it again); replica 2 stays held.
    inner.push(table('e2', route(1)));
    const partly = await source.fetch();
    expect(endpoints(partly)).toEqual([`${route(1).endpoint}:Ready`, `${route(2).endpoint}:Ready`]);
    expect(partly.held?.map((h) => h.replicaId)).toEqual(['replica/demo/2']);
    await source.close();
  });

  it('takes Temporal at its word for every endpoint it lists: a drain during the hold leaves at once', async () => {
    const alive = new Set([route(1).endpoint, route(2).endpoint]);
    const { inner, source } = holding(alive);
    inner.push(table('e1', route(1), route(2)));
    await source.fetch();
    inner.push(table('e2'));
    await source.fetch();
    inner.push(table('e2', route(1)));
    await source.fetch();
    // Replica 1, rebuilt, drains while replica 2 is still held.
    inner.push(table('e2', route(1, 'Draining')));
    const draining = await source.fetch();
    expect(endpoints(draining)).toEqual([`${route(1).endpoint}:Draining`, `${route(2).endpoint}:Ready`]);
    // ... and then goes: within one epoch a route that leaves was withdrawn, and is not held.
    inner.push(table('e2'));
    const gone = await source.fetch();
    expect(endpoints(gone)).toEqual([`${route(2).endpoint}:Ready`]);
    await source.close();
  });

  it('lets a route withdrawn within one epoch leave at once, held by nothing', async () => {
    const { inner, source } = holding(new Set([route(1).endpoint, route(2).endpoint]));
    inner.push(table('e1', route(1), route(2)));
    await source.fetch();
    inner.push(table('e1', route(2)));
    const next = await source.fetch();
    expect(endpoints(next)).toEqual([`${route(2).endpoint}:Ready`]);
    expect(next.held).toBeUndefined();
    await source.close();
  });

  it('holds what a visibility read no longer lists, but not a replica that was draining', async () => {
    const { inner, source } = holding(new Set([route(1).endpoint, route(2).endpoint]));
    inner.push(table(undefined, route(1), route(2, 'Draining')));
    await source.fetch();
    inner.push(table(undefined));
    const next = await source.fetch();
    expect(endpoints(next)).toEqual([`${route(1).endpoint}:Ready`]);
    await source.close();
  });

  it('drops a held route whose engine stops answering, without waiting for the source', async () => {
    const alive = new Set([route(1).endpoint, route(2).endpoint]);
    const { inner, source, logs } = holding(alive);
    inner.push(table('e1', route(1), route(2)));
    await source.fetch();
    inner.push(table('e2'));
    await source.fetch();
    alive.delete(route(2).endpoint);
    // The source says nothing more; the failed checks end the hold on their own.
    const next = await source.fetch();
    expect(endpoints(next)).toEqual([`${route(1).endpoint}:Ready`]);
    expect(logs.join('\n')).toMatch(/18002 no longer held after .* failed 2 health checks/);
    await source.close();
  });

  it('holds no longer than its bound', async () => {
    const { inner, source, logs } = holding(new Set([route(1).endpoint]), { maxHoldMs: 60 });
    inner.push(table('e1', route(1)));
    await source.fetch();
    inner.push(table('e2'));
    expect(endpoints(await source.fetch())).toHaveLength(1);
    expect(endpoints(await source.fetch())).toEqual([]);
    expect(logs.join('\n')).toMatch(/held for the longest allowed/);
    await source.close();
  });
});
