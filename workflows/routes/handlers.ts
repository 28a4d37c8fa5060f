// The routes workflow's handlers, registered before its first await: the changes replicas and
// deployments signal (queued for the control worker's check), the routers' watchRoutes long poll,
// and the rollouts' awaitRouted wait.
// What they share with the workflow's loops is one RoutesContext. Workflow side.
import { condition, log, setHandler } from '@temporalio/workflow';
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
  DeploymentEntrySchema,
  droppedEverywhere,
  liveRouters,
  noteRouter,
  RouteEntrySchema,
  routedEverywhere,
  tableOf,
  viewOf,
  WatchRoutesRequestSchema,
  type RoutesState,
} from './state.js';

/** How long a wait gives routers to pick up a change before the silent ones are presumed gone. */
const ROUTER_ACK_TIMEOUT_MS = 10_000;

/** What the handlers, the loops and the hand-over share; only `state` crosses continue-as-new. */
export interface RoutesContext {
  state: RoutesState;
  /** Bumped by the one shared timer: every waiting watchRoutes answers then, changed or not. */
  tick: number;
  /** Calls waiting (watchRoutes, awaitRouted): the timer runs only while there are some. */
  waiting: number;
  /** Handing over: every waiting call answers now, new ones are refused until the next run. */
  closing: boolean;
  /**
   * Whether `state` is this run's to serve: false while a carried table's seal is unchecked
   * (workflows/carried.ts). Until then watches and waits hold and the query does not answer, so a
   * forged table reaches no router.
   */
  opened: boolean;
  /** Visibility to read: once at a fresh start (seed), or on request (replace). */
  resync: 'seed' | 'replace' | undefined;
  /** When the table last changed: a live router calls again within moments of every change. */
  changedAt: number;
  /** Per router, its watches waiting and when it last called or was answered. */
  watchesOf: Map<string, { waiting: number; answeredAt: number }>;
  publish(): void;
}

export function registerRoutesHandlers(ctx: RoutesContext): void {
  const { state } = ctx;
  setHandler(routeChangedSignal, (raw) => {
    const parsed = RouteEntrySchema.safeParse(raw);
    if (!parsed.success) return log.warn('routeChanged ignored: not a route entry', { issues: parsed.error.issues.slice(0, 3) });
    // Verified and signed by the control worker first (sign-queue.ts): anyone can signal.
    (state.pendingRoutes ??= []).push(parsed.data);
  });
  setHandler(deploymentChangedSignal, (raw) => {
    const parsed = DeploymentEntrySchema.safeParse(raw);
    if (!parsed.success) return log.warn('deploymentChanged ignored: not a deployment entry', { issues: parsed.error.issues.slice(0, 3) });
    // A deployment's name is an alias of its served name: taken only as the control worker reads
    // it from the deployment itself, and signed (sign-queue.ts). Anyone can signal.
    (state.pendingDeployments ??= []).push(parsed.data);
  });
  setHandler(resyncRoutesSignal, ({ reason }) => {
    log.info(`resyncing routes from visibility: ${reason}`);
    ctx.resync = 'replace';
  });
  registerWatchRoutes(ctx);
  registerAwaitRouted(ctx);
  setHandler(routesQuery, () => {
    if (!ctx.opened) throw new Error('the routes table this run was handed is not verified yet');
    return viewOf(state, Date.now());
  });
}

/** A router's long poll: answered at once when it is behind, else at the next change or tick. */
function registerWatchRoutes(ctx: RoutesContext): void {
  const { state } = ctx;
  setHandler(
    watchRoutesUpdate,
    async (request) => {
      if (!ctx.opened) await condition(() => ctx.opened);
      noteRouter(state, request, Date.now());
      // answeredAt: its last call or answer, whichever came later.
      const watch = ctx.watchesOf.get(request.routerId) ?? { waiting: 0, answeredAt: 0 };
      ctx.watchesOf.set(request.routerId, watch);
      watch.answeredAt = Date.now();
      if (request.epoch !== state.epoch || state.version > request.after) return tableOf(state);
      watch.waiting++;
      ctx.waiting++;
      const startedAt = ctx.tick;
      try {
        await condition(() => state.version > request.after || ctx.tick !== startedAt || ctx.closing);
      } finally {
        ctx.waiting--;
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
        if (ctx.closing) throw new Error('continuing as new; call again');
      },
    },
  );
}

/** A rollout's wait until every live router routes (or has dropped) a replica. */
function registerAwaitRouted(ctx: RoutesContext): void {
  const { state } = ctx;
  setHandler(
    awaitRoutedUpdate,
    async ({ replicaId, routed: wanted }): Promise<AwaitRoutedResult> => {
      if (!ctx.opened) await condition(() => ctx.opened);
      const done = (): boolean =>
        wanted === false ? droppedEverywhere(state, replicaId, Date.now()) : routedEverywhere(state, replicaId, Date.now());
      forgetGoneRouters(ctx, Date.now());
      ctx.waiting++;
      try {
        // A router that has not called since the last change within a few seconds is gone (a
        // live one calls again at once): it is not waited for; if alive, its next call brings it back.
        const acked = await condition(() => ctx.closing || done(), ROUTER_ACK_TIMEOUT_MS);
        if (!acked) {
          const gone = state.routers.filter((r) => r.seenAt < ctx.changedAt).map((r) => r.routerId);
          if (gone.length) log.warn(`routers ${gone.join(', ')} did not call after the last change: no longer waited for`);
          state.routers = state.routers.filter((r) => r.seenAt >= ctx.changedAt);
          await condition(() => ctx.closing || done());
        }
      } finally {
        ctx.waiting--;
      }
      return { routed: done(), routers: liveRouters(state, Date.now()).length, version: state.version };
    },
    {
      validator: ({ replicaId }) => {
        if (typeof replicaId !== 'string' || replicaId === '') throw new Error('awaitRouted needs a replicaId');
        if (ctx.closing) throw new Error('continuing as new; call again');
      },
    },
  );
}

/**
 * A live router always has a watch waiting here, but for the moment between an answer and its
 * next call. One with none waiting, answered long ago, died after that answer: a drain need not
 * give it the whole ack timeout (it comes back with its next call if it lives).
 */
function forgetGoneRouters(ctx: RoutesContext, now: number): void {
  const { state } = ctx;
  const gone = state.routers.filter((r) => {
    const watch = ctx.watchesOf.get(r.routerId);
    return watch !== undefined && watch.waiting === 0 && now - watch.answeredAt > ROUTER_ACK_TIMEOUT_MS;
  });
  if (!gone.length) return;
  log.warn(`routers ${gone.map((r) => r.routerId).join(', ')} did not call again after an answer: no longer waited for`);
  state.routers = state.routers.filter((r) => !gone.includes(r));
  for (const r of gone) ctx.watchesOf.delete(r.routerId);
}
