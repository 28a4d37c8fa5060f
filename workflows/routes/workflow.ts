// The `routes` workflow (workflow id `routes`): the route table every router installs. Replicas
// and deployments signal their changes; routers long-poll it with the watchRoutes Update and
// acknowledge what they installed; rollouts ask awaitRouted whether every live router has a
// replica. So a route change costs one signal and one answer per router, and an idle router
// costs one Update every five minutes, instead of every router listing visibility twice a second.
import { allHandlersFinished, condition, setCurrentDetails, sleep, workflowInfo } from '@temporalio/workflow';
import type { ControlActivities } from '../../activities/index.js';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { refusedCarried, sealForNextRun, type SealedInput } from '../carried.js';
import { registerRoutesHandlers, type RoutesContext } from './handlers.js';
import { verifyDeploymentChanges, verifyRouteChanges } from './sign-queue.js';
import {
  applyDeployment,
  applyRoute,
  applySeed,
  initialRoutesState,
  pruneRouters,
  routesDetails,
  WATCH_TIMEOUT_MS,
  type RoutesState,
} from './state.js';
import { controlActivities } from '../toolkit.js';

export interface RoutesInput extends SealedInput {
  /** State carried over continue-as-new; honoured only when its seal verifies (workflows/carried.ts). */
  carried?: RoutesState;
}

export async function routes(input: RoutesInput = {}): Promise<void> {
  const info = workflowInfo();
  // Anyone may start this workflow by hand, or continue as new into it: a table it is handed is
  // served only once its seal verifies, after the park.
  const carried = info.continuedFromExecutionRunId !== undefined ? input.carried : undefined;
  const state: RoutesState = carried ?? initialRoutesState(info.firstExecutionRunId);
  const ctx: RoutesContext = {
    state,
    tick: 0,
    waiting: 0,
    closing: false,
    opened: carried === undefined,
    // A fresh start learns the replicas that existed before it from visibility, once.
    resync: carried ? undefined : 'seed',
    changedAt: Date.now(),
    watchesOf: new Map(),
    publish: () => setCurrentDetails(routesDetails(state, Date.now())),
  };
  registerRoutesHandlers(ctx);
  const upgrade = watchUpgrades();
  await upgrade.park(input.upgrading);
  if (carried && (await refusedCarried(input)) !== undefined) {
    // Nothing of it is kept: the table is learnt again from the replicas themselves.
    for (const key of Object.keys(state)) delete (state as unknown as Record<string, unknown>)[key];
    Object.assign(state, initialRoutesState(info.firstExecutionRunId));
    ctx.resync = 'seed';
  }
  ctx.opened = true;

  const { listReplicaRoutes } = controlActivities('read the replicas’ route memos from visibility', {
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
  });
  ctx.publish();
  void verifyRouteChanges(state, (entry) => {
    if (applyRoute(state, entry)) {
      ctx.changedAt = Date.now();
      ctx.publish();
    }
  });
  // Deployments carried unsigned (applied by a release that did not sign them) are read and
  // signed again: routers with a key list only signed ones.
  for (const d of state.deployments) if (!d.signature) (state.pendingDeployments ??= []).push(d);
  void verifyDeploymentChanges(state, (entry) => {
    if (applyDeployment(state, entry)) ctx.publish();
  });
  void resyncFromVisibility(ctx, listReplicaRoutes);
  void tickWhileWaiting(ctx);
  await condition(() => workflowInfo().continueAsNewSuggested || upgrade.requested());
  // Every waiting call answers now with the current table; new ones are refused until the next run.
  ctx.closing = true;
  await condition(allHandlersFinished);
  const next = await sealForNextRun((): RoutesInput => ({ carried: state, upgrading: upgrade.requested() }));
  await continueAsNewWith<typeof routes>(next.upgrading === true)(next);
}

/** Reads the replicas' route memos from visibility whenever a resync is asked for. */
async function resyncFromVisibility(ctx: RoutesContext, listReplicaRoutes: ControlActivities['listReplicaRoutes']): Promise<void> {
  for (;;) {
    await condition(() => ctx.resync !== undefined);
    const replace = ctx.resync === 'replace';
    ctx.resync = undefined;
    const entries = await listReplicaRoutes();
    if (applySeed(ctx.state, entries, replace)) ctx.publish();
  }
}

/**
 * One timer for every waiting call, running only while some call waits: it answers watchers
 * whose table did not change (so each router hears from the workflow at least every five
 * minutes, and the workflow from each router), and re-checks awaitRouted as routers age out.
 */
async function tickWhileWaiting(ctx: RoutesContext): Promise<void> {
  for (;;) {
    await condition(() => ctx.waiting > 0);
    await sleep(WATCH_TIMEOUT_MS);
    ctx.tick++;
    pruneRouters(ctx.state, Date.now());
    ctx.publish();
  }
}
