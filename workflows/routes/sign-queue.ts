// The routes workflow's intake: a routeChanged signal is not taken at its word. Each entry waits
// in the state (so it crosses continue-as-new) until the control worker's signRoutes activity has
// read the replica it names and returned the route as that replica's own state and placement
// ticket bear it out, signed (activities/route-signing.ts); only that is applied. Workflow code.
import { condition, proxyActivities } from '@temporalio/workflow';
import type { ControlActivities } from '../../activities/index.js';
import type { RouteEntry } from './definitions.js';

/** Entries verified per activity call. */
const BATCH = 50;

export interface RouteIntake {
  /** Route changes not yet verified, oldest first. */
  pendingRoutes?: RouteEntry[];
}

/** Verifies queued entries in order, for ever, applying what the control worker returns. */
export async function verifyRouteChanges(state: RouteIntake, apply: (entry: RouteEntry) => void): Promise<never> {
  const { signRoutes } = proxyActivities<ControlActivities>({
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
    summary: 'verify route changes against their replicas, and sign them',
  });
  for (;;) {
    await condition(() => (state.pendingRoutes?.length ?? 0) > 0);
    const batch = state.pendingRoutes!.slice(0, BATCH);
    const verified = await signRoutes(batch);
    state.pendingRoutes!.splice(0, batch.length);
    for (const entry of verified) apply(entry);
  }
}
