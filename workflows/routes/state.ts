// The routes workflow's state and the pure rules that change it: route and deployment changes
// (each bumps the version), routers' acknowledgements and liveness, and whether a replica is
// routed everywhere. Plain JSON (it crosses continue-as-new); unit-tested without a server.
import { z } from 'zod';
import { AUTOSCALE_METRICS } from '../../common/autoscale.js';
import { REPLICA_PHASES, ROUTABLE_PHASES } from '../../common/replica-types.js';
import type { DeploymentEntry, RouteEntry, RoutesView, RouteTable, WatchRoutesRequest } from './definitions.js';

export interface RouterSeen {
  routerId: string;
  /** Workflow time (ms) of its last watchRoutes. */
  seenAt: number;
  applied: number;
  epoch: string | undefined;
}

export interface RoutesState {
  epoch: string;
  version: number;
  /** Sorted by replicaId. */
  routes: RouteEntry[];
  /** Sorted by name. */
  deployments: DeploymentEntry[];
  /** replicaId → the version since which it is routable (Ready or Unknown, with an endpoint). */
  routableSince: Record<string, number>;
  /** replicaId → the version since which it is not (Draining, gone): drains wait until routers have it. */
  withdrawnSince?: Record<string, number>;
  routers: RouterSeen[];
  /** routeChanged entries waiting for the control worker's verification (sign-queue.ts). */
  pendingRoutes?: RouteEntry[];
  /** deploymentChanged entries waiting for it, one per deployment name (the latest). */
  pendingDeployments?: DeploymentEntry[];
}

/** Withdrawals remembered; older ones are long applied by every live router. */
const WITHDRAWALS_KEPT = 500;

function noteWithdrawn(state: RoutesState, replicaId: string): void {
  const withdrawn = (state.withdrawnSince ??= {});
  withdrawn[replicaId] = state.version;
  const ids = Object.keys(withdrawn);
  if (ids.length > WITHDRAWALS_KEPT) {
    for (const id of ids.sort((a, b) => withdrawn[a]! - withdrawn[b]!).slice(0, ids.length - WITHDRAWALS_KEPT)) delete withdrawn[id];
  }
}

/** A router that has not called for this long is not waited for (two long-poll timeouts). */
export const WATCH_TIMEOUT_MS = 5 * 60_000;
export const LIVE_ROUTER_MS = 2 * WATCH_TIMEOUT_MS;

// Signals can come from anyone with access to the namespace: an entry that does not parse is
// ignored (and logged), never half-applied.
export const RouteEntrySchema = z.object({
  replicaId: z.string().min(1).max(300),
  deployment: z.string().min(1).max(200),
  servedName: z.string().min(1).max(300),
  endpoint: z.string().max(300),
  phase: z.enum(REPLICA_PHASES),
  revision: z.string().max(200).optional(),
  signature: z.string().max(300).optional(),
});
export const DeploymentEntrySchema = z.object({
  name: z.string().min(1).max(200),
  servedName: z.string().min(1).max(300),
  model: z.string().min(1).max(300),
  phase: z.string().min(1).max(100),
  desired: z.number().int().min(0),
  /** Its autoscaling, with every default filled in (common/autoscale.ts): what routers scale by. */
  autoscale: z
    .object({
      min: z.number().int().min(0),
      max: z.number().int().min(0),
      metric: z.enum(AUTOSCALE_METRICS),
      target: z.number().positive(),
      idleToZeroSeconds: z.number().int().min(1).optional(),
      upAfterSeconds: z.number().int().min(0),
      downAfterSeconds: z.number().int().min(0),
      tolerance: z.number().min(0),
      ignoreSheddable: z.literal(true).optional(),
    })
    .optional(),
  /** Its profile's sleep policy (catalog/sleep.ts): what routers put idle replicas to sleep by. */
  sleep: z
    .object({
      afterSeconds: z.number().int().min(1),
      level: z.union([z.literal(1), z.literal(2)]),
      stopAfterSeconds: z.number().int().min(1).optional(),
      minAwakeSeconds: z.number().int().min(0),
    })
    .optional(),
  signature: z.string().max(300).optional(),
});
export const WatchRoutesRequestSchema = z.object({
  routerId: z.string().min(1).max(300),
  after: z.number().int().min(-1),
  applied: z.number().int().min(-1),
  epoch: z.string().max(100).optional(),
});

export function initialRoutesState(epoch: string): RoutesState {
  return { epoch, version: 0, routes: [], deployments: [], routableSince: {}, routers: [] };
}

function routable(entry: RouteEntry): boolean {
  return entry.endpoint !== '' && ROUTABLE_PHASES.includes(entry.phase);
}

function sameRoute(a: RouteEntry, b: RouteEntry): boolean {
  return (
    a.deployment === b.deployment &&
    a.servedName === b.servedName &&
    a.endpoint === b.endpoint &&
    a.phase === b.phase &&
    a.revision === b.revision &&
    a.signature === b.signature
  );
}

/** Applies one replica's route; true when the table changed (and its version went up). */
export function applyRoute(state: RoutesState, entry: RouteEntry): boolean {
  const at = state.routes.findIndex((r) => r.replicaId === entry.replicaId);
  const existing = at >= 0 ? state.routes[at] : undefined;
  const gone = entry.phase === 'Stopped' || entry.phase === 'Failed';
  if (gone) {
    if (!existing) return false;
    state.routes.splice(at, 1);
    const wasRoutable = state.routableSince[entry.replicaId] !== undefined;
    delete state.routableSince[entry.replicaId];
    state.version++;
    if (wasRoutable) noteWithdrawn(state, entry.replicaId);
    return true;
  }
  if (existing && sameRoute(existing, entry)) return false;
  state.version++;
  const wasRoutable = existing !== undefined && routable(existing) && existing.endpoint === entry.endpoint;
  if (!routable(entry)) {
    if (state.routableSince[entry.replicaId] !== undefined) noteWithdrawn(state, entry.replicaId);
    delete state.routableSince[entry.replicaId];
  } else if (!wasRoutable) state.routableSince[entry.replicaId] = state.version;
  const copy: RouteEntry = { ...entry };
  if (existing) state.routes[at] = copy;
  else {
    state.routes.push(copy);
    state.routes.sort((a, b) => (a.replicaId < b.replicaId ? -1 : a.replicaId > b.replicaId ? 1 : 0));
  }
  return true;
}

/** Applies one deployment's entry; true when the table changed. */
export function applyDeployment(state: RoutesState, entry: DeploymentEntry): boolean {
  const at = state.deployments.findIndex((d) => d.name === entry.name);
  const existing = at >= 0 ? state.deployments[at] : undefined;
  if (entry.phase === 'Undeployed') {
    if (!existing) return false;
    state.deployments.splice(at, 1);
    state.version++;
    return true;
  }
  if (
    existing &&
    existing.servedName === entry.servedName &&
    existing.model === entry.model &&
    existing.phase === entry.phase &&
    existing.desired === entry.desired &&
    JSON.stringify(existing.autoscale) === JSON.stringify(entry.autoscale) &&
    JSON.stringify(existing.sleep) === JSON.stringify(entry.sleep) &&
    existing.signature === entry.signature
  )
    return false;
  state.version++;
  if (existing) state.deployments[at] = { ...entry };
  else {
    state.deployments.push({ ...entry });
    state.deployments.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }
  return true;
}

/**
 * Takes what visibility says for replicas the table does not know: signals are fresher than
 * visibility, so a replica already in the table keeps its entry. With `replace`, replicas the
 * table knows but visibility does not (closed without a last signal) are removed too.
 */
export function applySeed(state: RoutesState, entries: readonly RouteEntry[], replace: boolean): boolean {
  let changed = false;
  const seen = new Set(entries.map((e) => e.replicaId));
  if (replace) {
    for (const r of [...state.routes]) {
      if (!seen.has(r.replicaId)) changed = applyRoute(state, { ...r, phase: 'Stopped' }) || changed;
    }
  }
  for (const entry of entries) {
    const known = state.routes.some((r) => r.replicaId === entry.replicaId);
    if (!known || replace) changed = applyRoute(state, entry) || changed;
  }
  return changed;
}

/** Notes a router's call (its acknowledgement) and forgets routers silent for too long. */
export function noteRouter(state: RoutesState, request: WatchRoutesRequest, now: number): void {
  const seen: RouterSeen = { routerId: request.routerId, seenAt: now, applied: request.applied, epoch: request.epoch };
  const at = state.routers.findIndex((r) => r.routerId === request.routerId);
  if (at >= 0) state.routers[at] = seen;
  else state.routers.push(seen);
  pruneRouters(state, now);
}

export function pruneRouters(state: RoutesState, now: number): void {
  state.routers = state.routers.filter((r) => now - r.seenAt <= LIVE_ROUTER_MS);
}

export function liveRouters(state: RoutesState, now: number): RouterSeen[] {
  return state.routers.filter((r) => now - r.seenAt <= LIVE_ROUTER_MS);
}

/** True once every live router has installed a version in which the replica is routable (at once with none). */
export function routedEverywhere(state: RoutesState, replicaId: string, now: number): boolean {
  const live = liveRouters(state, now);
  if (live.length === 0) return true;
  const since = state.routableSince[replicaId];
  if (since === undefined) return false;
  return live.every((r) => r.epoch === state.epoch && r.applied >= since);
}

/** True once every live router has installed a version in which the replica is not routable (at once with none). */
export function droppedEverywhere(state: RoutesState, replicaId: string, now: number): boolean {
  if (state.routableSince[replicaId] !== undefined) return false;
  const live = liveRouters(state, now);
  if (live.length === 0) return true;
  const since = state.withdrawnSince?.[replicaId] ?? 0;
  return live.every((r) => r.epoch === state.epoch && r.applied >= since);
}

export function tableOf(state: RoutesState): RouteTable {
  return { epoch: state.epoch, version: state.version, routes: state.routes, deployments: state.deployments };
}

export function viewOf(state: RoutesState, now: number): RoutesView {
  return {
    ...tableOf(state),
    routers: state.routers.map((r) => ({
      routerId: r.routerId,
      applied: r.applied,
      seenAt: new Date(r.seenAt).toISOString(),
      live: now - r.seenAt <= LIVE_ROUTER_MS,
    })),
  };
}

/** The Web UI's current details: what a reader at 3 a.m. asks first. */
export function routesDetails(state: RoutesState, now: number): string {
  const live = liveRouters(state, now);
  const routableCount = state.routes.filter(routable).length;
  const lines = [
    `**routes** version ${state.version}: ${state.routes.length} replica(s), ${routableCount} routable; ${state.deployments.length} deployment(s)`,
    '',
    `routers (${live.length} live): ${live.map((r) => `${r.routerId} at v${r.applied}`).join(', ') || 'none'}`,
  ];
  return lines.join('\n');
}
