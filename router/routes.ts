// The router's route table: which replicas serve which model name, as a RouteSource reports them
// (Temporal in production, a static list in tests and the benchmark), refreshed on an interval
// and kept as it was while the source cannot be reached. Router side.
import { ROUTABLE_PHASES, type ReplicaPhase } from '../common/replica-types.js';

/** One replica as the router sees it: the `route` memo the replica workflow publishes. */
export interface RouteEntry {
  deployment: string;
  /** The model name clients send. */
  servedName: string;
  /** Base URL of the replica's OpenAI server, e.g. http://10.0.0.5:18003; empty until the engine is up. */
  endpoint: string;
  phase: ReplicaPhase;
  replicaId: string;
}

export interface RouteSource {
  /** For /health and the log: `static`, `temporal 127.0.0.1:7233/default`. */
  readonly description: string;
  /** Every replica the source knows now, routable or not. Rejects when the source cannot be reached. */
  fetch(): Promise<RouteEntry[]>;
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
}

/** A fixed list of routes that tests and the benchmark can change at will. */
export class StaticRouteSource implements RouteSource {
  readonly description = 'static';
  private entries: RouteEntry[] = [];

  constructor(routes: readonly StaticRoute[] = []) {
    this.set(routes);
  }

  set(routes: readonly StaticRoute[]): void {
    this.entries = routes.map((route, i) => ({
      deployment: route.deployment ?? route.servedName,
      servedName: route.servedName,
      endpoint: route.endpoint,
      phase: route.phase ?? 'Ready',
      replicaId: `static/${route.deployment ?? route.servedName}/${i}`,
    }));
  }

  fetch(): Promise<RouteEntry[]> {
    return Promise.resolve(this.entries);
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
}

/**
 * Groups replicas by served name. A model whose replicas are all still starting (or draining) is
 * kept with no endpoints, so that a client hears 503 "not ready yet", not 404 "no such model".
 * Deployment names are accepted as aliases when they do not clash with a served name.
 */
export function buildModelRoutes(entries: readonly RouteEntry[]): Map<string, ModelRoute> {
  const byName = new Map<string, ModelRoute>();
  for (const entry of entries) {
    let route = byName.get(entry.servedName);
    if (!route) {
      route = { servedName: entry.servedName, deployments: [], endpoints: [] };
      byName.set(entry.servedName, route);
    }
    if (!route.deployments.includes(entry.deployment)) route.deployments.push(entry.deployment);
    // A malformed endpoint keeps its replica out of rotation without holding up the rest.
    if (entry.endpoint !== '' && isRoutable(entry.phase) && !route.endpoints.includes(entry.endpoint) && isEndpointUrl(entry.endpoint)) {
      route.endpoints.push(entry.endpoint);
    }
  }
  for (const route of byName.values()) {
    route.endpoints.sort();
    route.deployments.sort();
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

/** A stable text of a table, to tell a changed table from the same one polled again. */
export function routesSignature(entries: readonly RouteEntry[]): string {
  return entries
    .map((e) => `${e.servedName}\t${e.deployment}\t${e.endpoint}\t${isRoutable(e.phase) ? 1 : 0}`)
    .sort()
    .join('\n');
}

export type SourceState = 'connecting' | 'ok' | 'unreachable';

export interface SourceStatus {
  source: string;
  state: SourceState;
  /** When the current state began (ISO time). */
  since: string;
  /** When the table was last read successfully; undefined if never. */
  lastUpdate: string | undefined;
  /** The last error while unreachable. */
  error: string | undefined;
}

export interface RouteRefresherOptions {
  intervalMs: number;
  /** Called with each table that differs from the last one applied. */
  apply(entries: RouteEntry[]): void;
  log(line: string): void;
}

/**
 * Polls a RouteSource. A failed poll keeps the last table (the router must outlive the control
 * plane), is logged once per outage and shown in /health; the next good poll catches up.
 * Polls never overlap: the next one is scheduled when the previous has settled.
 */
export class RouteRefresher {
  private state: SourceState = 'connecting';
  private since = new Date();
  private lastUpdate: Date | undefined;
  private lastError: string | undefined;
  private signature: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly source: RouteSource,
    private readonly options: RouteRefresherOptions,
  ) {}

  /**
   * Polls once now, so that the first table is there before the server answers, but waits for
   * it at most `firstWaitMs`: a router started while Temporal is down must still come up.
   */
  async start(firstWaitMs = 2000): Promise<void> {
    const first = this.refresh();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([first, new Promise<void>((resolve) => (timer = setTimeout(resolve, firstWaitMs)))]);
    clearTimeout(timer);
    void first.then(() => this.schedule());
  }

  /** Polls now; resolves when this poll (or the one already running) has settled. */
  refresh(): Promise<void> {
    this.running ??= this.poll().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  status(): SourceStatus {
    return {
      source: this.source.description,
      state: this.state,
      since: this.since.toISOString(),
      lastUpdate: this.lastUpdate?.toISOString(),
      error: this.state === 'unreachable' ? this.lastError : undefined,
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
    await this.source.close();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      void this.refresh().then(() => this.schedule());
    }, this.options.intervalMs);
    this.timer.unref();
  }

  private async poll(): Promise<void> {
    let entries: RouteEntry[];
    try {
      entries = await this.source.fetch();
    } catch (err) {
      this.lastError = err instanceof Error ? err.message : String(err);
      if (this.state !== 'unreachable') {
        this.state = 'unreachable';
        this.since = new Date();
        const kept = this.signature === undefined ? 'no routes yet' : 'keeping the last route table';
        this.options.log(`router: route source ${this.source.description} unreachable (${this.lastError}); ${kept}`);
      }
      return;
    }
    if (this.state !== 'ok') {
      if (this.state === 'unreachable') {
        const seconds = ((Date.now() - this.since.getTime()) / 1000).toFixed(1);
        this.options.log(`router: route source ${this.source.description} reachable again after ${seconds} s; catching up`);
      }
      this.state = 'ok';
      this.since = new Date();
    }
    this.lastUpdate = new Date();
    const signature = routesSignature(entries);
    if (signature === this.signature) return;
    this.signature = signature;
    try {
      this.options.apply(entries);
    } catch (err) {
      // Keep the table we have; the next change will try again.
      this.signature = undefined;
      this.options.log(`router: could not apply the route table: ${(err as Error).message}`);
    }
  }
}
