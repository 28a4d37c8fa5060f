// The router's route table: which replicas serve which model name, as a RouteSource reports them
// (the routes workflow in production, visibility as its fallback, the primary process for a
// cluster worker, a static list in tests and benchmarks), read in a loop and kept as it was while
// the source cannot be reached. Router side.
import { keyChainOf } from '../../common/engine-keys.js';
import { parseReplicaWorkflowId } from '../../common/names.js';
import { ROUTABLE_PHASES, type ReplicaPhase } from '../../common/replica-types.js';
import type { DeploymentEntry, RouteEntry } from '../../workflows/routes/definitions.js';

export type { DeploymentEntry, RouteEntry };

/** One table as a source hands it over. */
export interface RouteSnapshot {
  routes: RouteEntry[];
  /** Deployments list their model even with no replica (503 while it scales from zero, not 404). */
  deployments: DeploymentEntry[];
  /** The routes workflow's version of this table; undefined from sources that have none. */
  version?: number;
  /**
   * The routes workflow run this table comes from (a new one after the workflow started afresh);
   * undefined from visibility and static lists. Within one epoch a route that leaves was withdrawn
   * on purpose; across epochs, or from visibility, it may only have been forgotten (routes/held.ts).
   */
  epoch?: string;
  /** Routes kept although the source no longer lists them, while their engines answer (routes/held.ts). */
  held?: HeldRouteView[];
}

/** A route the router keeps serving although Temporal's view lost it: for /health and the log. */
export interface HeldRouteView {
  servedName: string;
  endpoint: string;
  replicaId: string;
  /** ISO time the hold began. */
  since: string;
}

export interface RouteSource {
  /** For /health and the log: `static`, `temporal 127.0.0.1:7233/default`. */
  readonly description: string;
  /**
   * True when fetch() waits for a change itself (a long poll): it is called again as soon as it
   * returns, and only a failure is followed by a pause.
   */
  readonly longPoll?: boolean;
  /** The current table (or, for a long poll, the next one). Rejects when the source cannot be reached. */
  fetch(): Promise<RouteSnapshot>;
  /** The table of this version is installed (the routes workflow hears it on the next call). */
  installed?(version: number | undefined): void;
  /** Sources that read Temporal: their client, which the autoscaler's Updates use too. */
  temporalClient?(): Promise<import('@temporalio/client').Client>;
  close(): Promise<void>;
}

export function isRoutable(phase: ReplicaPhase): boolean {
  return ROUTABLE_PHASES.includes(phase);
}

/** An endpoint the router can open a pool to: http(s)://host:port with no path. */
export function isEndpointUrl(endpoint: string): boolean {
  try {
    const url = new URL(endpoint);
    return (url.protocol === 'http:' || url.protocol === 'https:') && (url.pathname === '/' || url.pathname === '') && url.search === '';
  } catch {
    return false;
  }
}

export interface StaticRoute {
  servedName: string;
  endpoint: string;
  /** Defaults to the served name. */
  deployment?: string;
  /** Defaults to Ready. */
  phase?: ReplicaPhase;
  /** The replica run chain its engine's key is derived from (common/engine-keys.ts); none: the fleet key. */
  chain?: string;
  /** The pin of the engine's TLS certificate (common/engine-tls.ts): reached over https, that certificate alone. */
  tlsPin?: string;
}

/** A fixed list of routes that tests and the benchmark can change at will. */
export class StaticRouteSource implements RouteSource {
  readonly description = 'static';
  private entries: RouteEntry[] = [];
  private deployments: DeploymentEntry[] = [];

  constructor(routes: readonly StaticRoute[] = []) {
    this.set(routes);
  }

  setDeployments(deployments: readonly DeploymentEntry[]): void {
    this.deployments = [...deployments];
  }

  set(routes: readonly StaticRoute[]): void {
    this.entries = routes.map((route, i) => ({
      deployment: route.deployment ?? route.servedName,
      servedName: route.servedName,
      endpoint: route.endpoint,
      phase: route.phase ?? 'Ready',
      replicaId: `static/${route.deployment ?? route.servedName}/${i}`,
      ...(route.chain !== undefined ? { chain: route.chain } : {}),
      ...(route.tlsPin !== undefined ? { tlsPin: route.tlsPin } : {}),
    }));
  }

  fetch(): Promise<RouteSnapshot> {
    return Promise.resolve({ routes: this.entries, deployments: this.deployments });
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** `name=http://host:port,name=http://host:port` (the `--static-routes` flag) as routes. */
export function parseStaticRoutes(spec: string): StaticRoute[] {
  return spec
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part !== '')
    .map((part) => {
      const eq = part.indexOf('=');
      const servedName = part.slice(0, eq).trim();
      const endpoint = part.slice(eq + 1).trim();
      if (eq <= 0 || !/^https?:\/\/[^/]+\/?$/.test(endpoint)) {
        throw new Error(`static route "${part}" must be NAME=http://HOST:PORT`);
      }
      return { servedName, endpoint: endpoint.replace(/\/$/, '') };
    });
}

/** A model name and every deployment and routable endpoint behind it. */
export interface ModelRoute {
  servedName: string;
  deployments: string[];
  /** Endpoints of routable replicas, sorted and without duplicates; may be empty (known but not Ready). */
  endpoints: string[];
  /** A deployment lists it: in /v1/models even with no routable replica (scaled to zero). */
  listed: boolean;
  /** One of its deployments is autoscaled: with no routable replica, requests are held and wake it. */
  autoscaled: boolean;
  /**
   * Its replicas asleep (docs/sleep.md) of each deployment's serving revision, by replica id:
   * with no routable replica, the first is woken for a request.
   */
  sleepers: SleepingReplica[];
}

/** A replica whose engine sleeps: not routable, but woken in about a second (the `wakeReplica` Update). */
export interface SleepingReplica {
  /** Its workflow id, which the wake is sent to. */
  replicaId: string;
  deployment: string;
  endpoint: string;
}

/**
 * Groups replicas by served name. A model whose replicas are all still starting (or draining) is
 * kept with no endpoints, so that a client hears 503 "not ready yet", not 404 "no such model".
 * Deployment names are accepted as aliases when they do not clash with a served name.
 */
export function buildModelRoutes(entries: readonly RouteEntry[], deployments: readonly DeploymentEntry[] = []): Map<string, ModelRoute> {
  const byName = new Map<string, ModelRoute>();
  for (const d of deployments) {
    let route = byName.get(d.servedName);
    if (!route) {
      route = { servedName: d.servedName, deployments: [], endpoints: [], listed: true, autoscaled: false, sleepers: [] };
      byName.set(d.servedName, route);
    }
    route.listed = true;
    // Not while it is being undeployed: nobody would wake it, so a request is told at once.
    if (d.autoscale !== undefined && d.phase !== 'Undeploying' && d.phase !== 'Undeployed') route.autoscaled = true;
    if (!route.deployments.includes(d.name)) route.deployments.push(d.name);
  }
  const serving = servingRevisions(entries);
  for (const entry of entries) {
    let route = byName.get(entry.servedName);
    if (!route) {
      route = { servedName: entry.servedName, deployments: [], endpoints: [], listed: false, autoscaled: false, sleepers: [] };
      byName.set(entry.servedName, route);
    }
    if (!route.deployments.includes(entry.deployment)) route.deployments.push(entry.deployment);
    // A malformed endpoint keeps its replica out of rotation without holding up the rest.
    if (entry.endpoint !== '' && isRoutable(entry.phase) && !route.endpoints.includes(entry.endpoint) && isEndpointUrl(entry.endpoint)) {
      route.endpoints.push(entry.endpoint);
    }
    const revision = serving.get(entry.deployment);
    if (
      entry.phase === 'Sleeping' &&
      isEndpointUrl(entry.endpoint) &&
      (entry.revision === undefined || revision === undefined || entry.revision === revision)
    ) {
      route.sleepers.push({ replicaId: entry.replicaId, deployment: entry.deployment, endpoint: entry.endpoint });
    }
  }
  for (const route of byName.values()) {
    route.endpoints.sort();
    route.deployments.sort();
    // Deterministic, the same at every router: the first by replica id is the one woken.
    route.sleepers.sort((a, b) => (a.replicaId < b.replicaId ? -1 : a.replicaId > b.replicaId ? 1 : 0));
  }
  const aliases: Array<[string, ModelRoute]> = [];
  for (const route of byName.values()) {
    for (const deployment of route.deployments) {
      if (!byName.has(deployment)) aliases.push([deployment, route]);
    }
  }
  for (const [alias, route] of aliases) if (!byName.has(alias)) byName.set(alias, route);
  return byName;
}

/**
 * Each deployment's serving revision: that of its newest replica (the highest sequence number).
 * A rollout starts its new replicas after the old ones, so a sleeper of an older revision, which
 * the rollout replaces without waking (issue 38), is not woken for a request either.
 */
export function servingRevisions(entries: readonly RouteEntry[]): Map<string, string | undefined> {
  const newest = new Map<string, { seq: number; revision: string | undefined }>();
  for (const entry of entries) {
    const seq = parseReplicaWorkflowId(entry.replicaId)?.seq ?? -1;
    const seen = newest.get(entry.deployment);
    if (seen === undefined || seq > seen.seq) newest.set(entry.deployment, { seq, revision: entry.revision });
  }
  return new Map([...newest].map(([deployment, n]) => [deployment, n.revision]));
}

/** A stable text of a table, to tell a changed table from the same one polled again. */
export function routesSignature(entries: readonly RouteEntry[], deployments: readonly DeploymentEntry[] = []): string {
  // The key chain and pin too: an endpoint whose route names another run's key, or another
  // certificate, is opened anew with it.
  const routes = entries
    .map((e) => `${e.servedName}\t${e.deployment}\t${e.endpoint}\t${routeState(e)}\t${keyChainOf(e) ?? ''}\t${e.tlsPin ?? ''}`)
    .sort();
  // What autoscaling reads (desired, bounds, phase) is part of the table too: a new desired
  // count must reach the autoscaler, which sees only tables that differ.
  const listed = deployments
    .map(
      (d) =>
        `=${d.servedName}\t${d.name}\t${d.phase}\t${d.desired}\t${d.autoscale ? JSON.stringify(d.autoscale) : ''}\t${d.sleep ? JSON.stringify(d.sleep) : ''}`,
    )
    .sort();
  return [...routes, ...listed].join('\n');
}

/** What of a route's phase the router acts on: routable (1), asleep (woken for a request: its id and revision too), or neither (0). */
function routeState(e: RouteEntry): string {
  if (isRoutable(e.phase)) return '1';
  return e.phase === 'Sleeping' ? `z ${e.replicaId} ${e.revision ?? ''}` : '0';
}
