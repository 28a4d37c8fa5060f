// The `routes` workflow (workflow id `routes`): the route table every router installs. Replicas
// and deployments signal their changes; routers long-poll it with the watchRoutes Update and
// acknowledge what they installed; rollouts ask awaitRouted whether every live router has a
// replica. So a route change costs one signal and one answer per router, and an idle router
// costs one Update every five minutes, instead of every router listing visibility twice a second.
import { allHandlersFinished, condition, log, setCurrentDetails, setHandler, sleep, workflowInfo } from '@temporalio/workflow';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { verifyRouteChanges } from './sign-queue.js';
import {
  awaitRoutedUpdate,
  deploymentChangedSignal,
  resyncRoutesSignal,
  routeChangedSignal,
  routesQuery,
  watchRoutesUpdate,
  type AwaitRoutedResult,
} from './definitions.js';
import {
  applyDeployment,
  applyRoute,
  droppedEverywhere,
  applySeed,
  DeploymentEntrySchema,
  initialRoutesState,
  liveRouters,
  noteRouter,
  pruneRouters,
  RouteEntrySchema,
  routedEverywhere,
  routesDetails,
  tableOf,
  viewOf,
  WATCH_TIMEOUT_MS,
  WatchRoutesRequestSchema,
  type RoutesState,
} from './state.js';
import { controlActivities } from '../toolkit.js';

/** How long a wait gives routers to pick up a change before the silent ones are presumed gone. */
const ROUTER_ACK_TIMEOUT_MS = 10_000;

export interface RoutesInput {
  /** State carried over continue-as-new; honoured only in a run continued from one of ours. */
  carried?: RoutesState;
  /** Set by the hand-over to a new llmgw build (workflows/upgrade.ts). */
  upgrading?: boolean;
}

export async function routes(input: RoutesInput = {}): Promise<void> {
  const info = workflowInfo();
  // Anyone may start this workflow by hand; only our own continue-as-new may hand it a table.
  const carried = info.continuedFromExecutionRunId !== undefined ? input.carried : undefined;
  const state: RoutesState = carried ?? initialRoutesState(info.firstExecutionRunId);
  /** Bumped by the one shared timer: every waiting watchRoutes answers then, changed or not. */
  let tick = 0;
  let waiting = 0;
  let closing = false;
  // A fresh start learns the replicas that existed before it from visibility, once.
  let resync: 'seed' | 'replace' | undefined = carried ? undefined : 'seed';

  const publish = (): void => setCurrentDetails(routesDetails(state, Date.now()));

  /** When the table last changed: a live router calls again within moments of every change. */
  let changedAt = Date.now();
  // A live router always has a watch waiting here, but for the moment between an answer and
  // its next call. One with none waiting, answered long ago, died after that answer: a drain
  // need not give it the whole ack timeout (it comes back with its next call if it lives).
  const watchesOf = new Map<string, { waiting: number; answeredAt: number }>();
  const forgetGoneRouters = (now: number): void => {
    const gone = state.routers.filter((r) => {
      const watch = watchesOf.get(r.routerId);
      return watch !== undefined && watch.waiting === 0 && now - watch.answeredAt > ROUTER_ACK_TIMEOUT_MS;
    });
    if (!gone.length) return;
    log.warn(`routers ${gone.map((r) => r.routerId).join(', ')} did not call again after an answer: no longer waited for`);
    state.routers = state.routers.filter((r) => !gone.includes(r));
    for (const r of gone) watchesOf.delete(r.routerId);
  };
  setHandler(routeChangedSignal, (raw) => {
    const parsed = RouteEntrySchema.safeParse(raw);
    if (!parsed.success) return log.warn('routeChanged ignored: not a route entry', { issues: parsed.error.issues.slice(0, 3) });
    // Verified and signed by the control worker first (sign-queue.ts): anyone can signal.
    (state.pendingRoutes ??= []).push(parsed.data);
  });
  setHandler(deploymentChangedSignal, (raw) => {
    const parsed = DeploymentEntrySchema.safeParse(raw);
    if (!parsed.success) return log.warn('deploymentChanged ignored: not a deployment entry', { issues: parsed.error.issues.slice(0, 3) });
    if (applyDeployment(state, parsed.data)) publish();
  });
  setHandler(resyncRoutesSignal, ({ reason }) => {
    log.info(`resyncing routes from visibility: ${reason}`);
    resync = 'replace';
  });
  setHandler(
    watchRoutesUpdate,
    async (request) => {
      noteRouter(state, request, Date.now());
      // answeredAt: its last call or answer, whichever came later.
      const watch = watchesOf.get(request.routerId) ?? { waiting: 0, answeredAt: 0 };
      watchesOf.set(request.routerId, watch);
      watch.answeredAt = Date.now();
      if (request.epoch !== state.epoch || state.version > request.after) return tableOf(state);
      watch.waiting++;
      waiting++;
      const startedAt = tick;
      try {
        await condition(() => state.version > request.after || tick !== startedAt || closing);
      } finally {
        waiting--;
        watch.waiting--;
        watch.answeredAt = Date.now();
      }
      return tableOf(state);
    },
    {
      validator: (request) => {
        WatchRoutesRequestSchema.parse(request);
        // Refused, not accepted: a refusal costs no history, and the router calls again at once,
        // which lands on the next run.
        if (closing) throw new Error('continuing as new; call again');
      },
    },
  );
  setHandler(
    awaitRoutedUpdate,
    async ({ replicaId, routed: wanted }): Promise<AwaitRoutedResult> => {
      const done = (): boolean =>
        wanted === false ? droppedEverywhere(state, replicaId, Date.now()) : routedEverywhere(state, replicaId, Date.now());
      forgetGoneRouters(Date.now());
      waiting++;
      try {
        // A router that has not called since the last change within a few seconds is gone (a
        // live one calls again at once): it is not waited for; if alive, its next call brings it back.
        const acked = await condition(() => closing || done(), ROUTER_ACK_TIMEOUT_MS);
        if (!acked) {
          const gone = state.routers.filter((r) => r.seenAt < changedAt).map((r) => r.routerId);
          if (gone.length) log.warn(`routers ${gone.join(', ')} did not call after the last change: no longer waited for`);
          state.routers = state.routers.filter((r) => r.seenAt >= changedAt);
          await condition(() => closing || done());
        }
      } finally {
        waiting--;
      }
      return { routed: done(), routers: liveRouters(state, Date.now()).length, version: state.version };
    },
    {
      validator: ({ replicaId }) => {
        if (typeof replicaId !== 'string' || replicaId === '') throw new Error('awaitRouted needs a replicaId');
        if (closing) throw new Error('continuing as new; call again');
      },
    },
  );
  setHandler(routesQuery, () => viewOf(state, Date.now()));
  const upgrade = watchUpgrades();
  await upgrade.park(input.upgrading);

  const { listReplicaRoutes } = controlActivities('read the replicas’ route memos from visibility', {
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
  });
  const resyncLoop = async (): Promise<void> => {
    for (;;) {
      await condition(() => resync !== undefined);
      const replace = resync === 'replace';
      resync = undefined;
      const entries = await listReplicaRoutes();
      if (applySeed(state, entries, replace)) publish();
    }
  };
  // One timer for every waiting call, running only while some call waits: it answers watchers
  // whose table did not change (so each router hears from the workflow at least every five
  // minutes, and the workflow from each router), and re-checks awaitRouted as routers age out.
  const ticker = async (): Promise<void> => {
    for (;;) {
      await condition(() => waiting > 0);
      await sleep(WATCH_TIMEOUT_MS);
      tick++;
      pruneRouters(state, Date.now());
      publish();
    }
  };

  publish();
  void verifyRouteChanges(state, (entry) => {
    if (applyRoute(state, entry)) {
      changedAt = Date.now();
      publish();
    }
  });
  void resyncLoop();
  void ticker();
  await condition(() => workflowInfo().continueAsNewSuggested || upgrade.requested());
  // Every waiting call answers now with the current table; new ones are refused until the next run.
  closing = true;
  await condition(allHandlersFinished);
  const upgrading = upgrade.requested();
  await continueAsNewWith<typeof routes>(upgrading)({ carried: state, upgrading });
}
