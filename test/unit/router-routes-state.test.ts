// The routes workflow's rules, without a server: a route change bumps the version once and only
// when something changed, Stopped/Failed and Undeployed remove, visibility never overrides what a
// signal said, and a replica counts as routed once every live router has installed a version in
// which it is routable (at once when no router is live).
import { describe, expect, it } from 'vitest';
import type { RouteEntry } from '../../workflows/routes/definitions.js';
import {
  applyDeployment,
  applyRoute,
  applySeed,
  initialRoutesState,
  LIVE_ROUTER_MS,
  noteRouter,
  routedEverywhere,
  RouteEntrySchema,
  viewOf,
} from '../../workflows/routes/state.js';

const entry = (seq: number, phase: RouteEntry['phase'], endpoint = `http://10.0.0.${seq}:8000`): RouteEntry => ({
  replicaId: `replica/demo/${seq}`,
  deployment: 'demo',
  servedName: 'demo',
  endpoint,
  phase,
});

describe('routes workflow state', () => {
  it('bumps the version once per change, keeps the table sorted, and removes Stopped and Failed replicas', () => {
    const s = initialRoutesState('e1');
    expect(applyRoute(s, entry(2, 'Loading', ''))).toBe(true);
    expect(applyRoute(s, entry(1, 'Ready'))).toBe(true);
    expect(applyRoute(s, entry(1, 'Ready'))).toBe(false);
    expect(s.version).toBe(2);
    expect(s.routes.map((r) => r.replicaId)).toEqual(['replica/demo/1', 'replica/demo/2']);
    expect(applyRoute(s, entry(1, 'Stopped'))).toBe(true);
    expect(applyRoute(s, entry(1, 'Stopped'))).toBe(false);
    expect(applyRoute(s, entry(2, 'Failed'))).toBe(true);
    expect(s.routes).toEqual([]);
    expect(s.version).toBe(4);
  });

  it('lists deployments (even at zero replicas) until they are Undeployed', () => {
    const s = initialRoutesState('e1');
    const d = { name: 'chat', servedName: 'llama', model: 'llama-8b', phase: 'Ready', desired: 0 };
    expect(applyDeployment(s, d)).toBe(true);
    expect(applyDeployment(s, { ...d })).toBe(false);
    expect(applyDeployment(s, { ...d, desired: 2 })).toBe(true);
    expect(s.deployments).toEqual([{ ...d, desired: 2 }]);
    expect(applyDeployment(s, { ...d, phase: 'Undeployed' })).toBe(true);
    expect(s.deployments).toEqual([]);
  });

  it('takes visibility only for replicas no signal has told about, unless asked to replace', () => {
    const s = initialRoutesState('e1');
    applyRoute(s, entry(1, 'Draining'));
    applySeed(s, [entry(1, 'Ready'), entry(2, 'Ready')], false);
    expect(s.routes.map((r) => r.phase)).toEqual(['Draining', 'Ready']);
    applySeed(s, [entry(2, 'Ready')], true);
    expect(s.routes.map((r) => r.replicaId)).toEqual(['replica/demo/2']);
  });

  it('counts a replica routed once every live router has installed a version in which it is routable', () => {
    const s = initialRoutesState('e1');
    const now = 1_000_000;
    // No router is live: nobody needs to have it.
    expect(routedEverywhere(s, 'replica/demo/1', now)).toBe(true);
    noteRouter(s, { routerId: 'r1', after: 0, applied: 0, epoch: 'e1' }, now);
    noteRouter(s, { routerId: 'r2', after: 0, applied: 0, epoch: 'e1' }, now);
    applyRoute(s, entry(1, 'Loading', ''));
    expect(routedEverywhere(s, 'replica/demo/1', now)).toBe(false);
    applyRoute(s, entry(1, 'Ready'));
    const readyAt = s.version;
    noteRouter(s, { routerId: 'r1', after: readyAt, applied: readyAt, epoch: 'e1' }, now);
    expect(routedEverywhere(s, 'replica/demo/1', now)).toBe(false);
    noteRouter(s, { routerId: 'r2', after: readyAt, applied: readyAt, epoch: 'e1' }, now);
    expect(routedEverywhere(s, 'replica/demo/1', now)).toBe(true);
    // A later change elsewhere does not undo it; a new endpoint does.
    applyRoute(s, entry(2, 'Ready'));
    expect(routedEverywhere(s, 'replica/demo/1', now)).toBe(true);
    applyRoute(s, entry(1, 'Ready', 'http://10.0.0.99:8000'));
    expect(routedEverywhere(s, 'replica/demo/1', now)).toBe(false);
    // A router of another epoch (the workflow started afresh) has not installed this table.
    noteRouter(s, { routerId: 'r1', after: s.version, applied: s.version, epoch: 'old' }, now);
    noteRouter(s, { routerId: 'r2', after: s.version, applied: s.version, epoch: 'e1' }, now);
    expect(routedEverywhere(s, 'replica/demo/1', now)).toBe(false);
    // Silent for two long-poll timeouts: no longer waited for, and forgotten once another calls.
    const later = now + LIVE_ROUTER_MS + 1;
    expect(routedEverywhere(s, 'replica/demo/1', later)).toBe(true);
    noteRouter(s, { routerId: 'r2', after: s.version, applied: s.version, epoch: 'e1' }, later);
    expect(routedEverywhere(s, 'replica/demo/1', later)).toBe(true);
    noteRouter(s, { routerId: 'r3', after: s.version, applied: 0, epoch: 'e1' }, later);
    expect(routedEverywhere(s, 'replica/demo/1', later)).toBe(false);
    expect(viewOf(s, later).routers.map((r) => r.routerId)).toEqual(['r2', 'r3']);
  });

  it('refuses a route entry that does not parse, naming the field', () => {
    const bad = RouteEntrySchema.safeParse({ ...entry(1, 'Ready'), phase: 'Running' });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.path).toEqual(['phase']);
    expect(RouteEntrySchema.safeParse({ ...entry(1, 'Ready'), revision: 'r7' }).success).toBe(true);
  });
});
