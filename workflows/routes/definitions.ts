// The `routes` workflow's contract (workflow id `routes`, task queue `llmgw`): the route table
// every router installs, the signals replicas and deployments send it, and the Updates routers
// and rollouts call. One module both sides import; safe in workflow code. Control plane side.
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { ReplicaPhase } from '../../common/replica-types.js';

export const ROUTES_WORKFLOW_ID = 'routes';
export const ROUTES_WORKFLOW_TYPE = 'routes';

/** One replica's route: sent by the replica on every phase or endpoint change. Stopped or Failed removes it. */
export interface RouteEntry {
  replicaId: string;
  deployment: string;
  /** The model name clients send. */
  servedName: string;
  /** Base URL of the replica's OpenAI server; empty until the engine is up. */
  endpoint: string;
  phase: ReplicaPhase;
  /** The deployment revision the replica runs. */
  revision?: string;
  /**
   * The replica's run chain (its workflow's first run id) the signature was made for: a route
   * names one life of a replica id, and the signer refuses one of a chain that is not the live one.
   */
  chain?: string;
  /**
   * The chain whose engine key the endpoint's engine holds, when it is not `chain` (engines a
   * rebuilt replica adopted: common/engine-keys.ts). Routers derive the key they send from it.
   */
  keyChain?: string;
  /**
   * The SHA-256 pin of the certificate the endpoint's engine serves HTTPS with (its agent's
   * --engine-tls, read from the agent's attestation); routers accept that certificate alone.
   * Absent: plain HTTP.
   */
  tlsPin?: string;
  /** The control worker's signature (common/route-signature.ts): routers install a routable entry only with it. */
  signature?: string;
}

/**
 * One deployment, sent by deployModel: a deployment at 0 replicas still lists its model, and its
 * name is an alias of its served name. 'Undeployed' removes it. Applied only as the control worker
 * read it from the deployment itself (workflows/routes/sign-queue.ts).
 */
export interface DeploymentEntry {
  name: string;
  servedName: string;
  model: string;
  phase: string;
  desired: number;
  /** Its autoscaling, with every default filled in: what routers scale it by. */
  autoscale?: import('../../common/autoscale.js').AutoscalePolicy;
  /**
   * Its profile's sleep policy (docs/sleep.md): a router puts a replica idle `afterSeconds` to
   * sleep. Absent from entries of earlier releases, and for profiles that never sleep.
   */
  sleep?: import('../../common/sleep-types.js').SleepPolicy;
  /** The control worker's signature (common/route-signature.ts): routers list a deployment, and alias its name, only with it. */
  signature?: string;
}

export interface RouteTable {
  /** Changes whenever the workflow starts afresh (not at continue-as-new): versions restart then. */
  epoch: string;
  /** Goes up by one with every change to routes or deployments. */
  version: number;
  routes: RouteEntry[];
  deployments: DeploymentEntry[];
}

export interface WatchRoutesRequest {
  /** Stable for the life of a router process (host and pid). */
  routerId: string;
  /** The version the router has; answered as soon as the table is newer (-1: at once). */
  after: number;
  /** The version the router has installed: its acknowledgement, for awaitRouted. */
  applied: number;
  /** The epoch of the router's table; another epoch is answered at once. */
  epoch?: string;
}

export interface AwaitRoutedRequest {
  replicaId: string;
  /** true (default): wait until every live router routes to it; false: until every one has dropped it. */
  routed?: boolean;
}

export interface AwaitRoutedResult {
  /** Whether the wait is over (routed, or dropped when asked); false only when the workflow continued as new first: call again. */
  routed: boolean;
  /** Live routers that have the replica (0: none is live, so nobody needs to). */
  routers: number;
  version: number;
}

export interface RoutesView extends RouteTable {
  routers: Array<{ routerId: string; applied: number; seenAt: string; live: boolean }>;
}

export const routeChangedSignal = defineSignal<[RouteEntry]>('routeChanged');
export const deploymentChangedSignal = defineSignal<[DeploymentEntry]>('deploymentChanged');
/** Read the replicas' route memos from visibility again and take them for every replica (reconciliation's repair). */
export const resyncRoutesSignal = defineSignal<[{ reason: string }]>('resyncRoutes');
/** A router's long poll: the table once it is newer than `after`, or after at most about five minutes. */
export const watchRoutesUpdate = defineUpdate<RouteTable, [WatchRoutesRequest]>('watchRoutes');
/** Resolves once every live router has installed a table in which the replica is routable (or, with routed: false, is not). */
export const awaitRoutedUpdate = defineUpdate<AwaitRoutedResult, [AwaitRoutedRequest]>('awaitRouted');
export const routesQuery = defineQuery<RoutesView>('routes');
