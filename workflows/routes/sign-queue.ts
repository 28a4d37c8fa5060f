// The routes workflow's intake: neither a routeChanged nor a deploymentChanged signal is taken at
// its word. Each entry waits in the state (so it crosses continue-as-new) until the control
// worker has read the workflow it names and returned the entry as that workflow's own state bears
// it out, signed: signRoutes reads the replica and its placement ticket
// (activities/route-signing.ts), signDeployments the deployment (activities/deployment-signing.ts).
// Only what they return is applied. Workflow code.
import { condition, proxyActivities } from '@temporalio/workflow';
import type { ControlActivities } from '../../activities/index.js';
import type { DeploymentEntry, RouteEntry } from './definitions.js';

/** Entries verified per activity call. */
const BATCH = 50;

export interface RouteIntake {
  /** Route changes not yet verified, oldest first. */
  pendingRoutes?: RouteEntry[];
  /** Deployment changes not yet verified, oldest first. */
  pendingDeployments?: DeploymentEntry[];
}

function signingActivities(): Pick<ControlActivities, 'signRoutes' | 'signDeployments'> {
  return proxyActivities<ControlActivities>({
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
    summary: 'verify route and deployment changes against their workflows, and sign them',
  });
}

/**
 * Verifies the entries queued under `key` in order, for ever, a batch per activity call, and
 * applies what the control worker returns.
 */
async function verifyQueued<K extends keyof RouteIntake, E extends NonNullable<RouteIntake[K]>[number]>(
  state: RouteIntake,
  key: K,
  sign: (batch: E[]) => Promise<E[]>,
  apply: (entry: E) => void,
): Promise<never> {
  const queue = (): E[] | undefined => state[key] as E[] | undefined;
  for (;;) {
    await condition(() => (queue()?.length ?? 0) > 0);
    const batch = queue()!.slice(0, BATCH);
    const verified = await sign(batch);
    queue()!.splice(0, batch.length);
    for (const entry of verified) apply(entry);
  }
}

/** Route changes: each as its replica and rank 0's ticket bear it out. */
export function verifyRouteChanges(state: RouteIntake, apply: (entry: RouteEntry) => void): Promise<never> {
  return verifyQueued(state, 'pendingRoutes', signingActivities().signRoutes, apply);
}

/** Deployment changes: a deployment's name, served name and counts as it says them. */
export function verifyDeploymentChanges(state: RouteIntake, apply: (entry: DeploymentEntry) => void): Promise<never> {
  return verifyQueued(state, 'pendingDeployments', signingActivities().signDeployments, apply);
}
