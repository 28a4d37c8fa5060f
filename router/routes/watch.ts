// Routes learned from the `routes` workflow without polling: one long-poll Update (watchRoutes)
// answered as soon as the table changes, or after about five minutes unchanged, each call also
// acknowledging the version this router installed. While the workflow is missing or refuses,
// visibility is read instead at a slow interval and the workflow is asked for every second, so a
// router started before it exists (`llmgw up` starts the router first) installs its table within
// a second of its creation; while Temporal cannot be reached, the call fails and the router keeps
// its table. Router side; in a --workers cluster only the primary runs it.
import { hostname } from 'node:os';
import * as grpc from '@grpc/grpc-js';
import type { Client } from '@temporalio/client';
import { temporalConfig } from '../../temporal/connection.js';
import { ROUTES_WORKFLOW_ID, watchRoutesUpdate, type RouteTable } from '../../workflows/routes/definitions.js';
import { LazyRoutesClient, type TemporalSourceOptions } from './temporal-client.js';
import { readReplicaRoutes } from './visibility.js';
import type { RouteSnapshot, RouteSource } from './table.js';

/** Each attempt's wait; the Update itself may wait five minutes, and is joined again by its id. */
const ATTEMPT_MS = 60_000;
const PROBE_MS = 2_000;
const VISIBILITY_DEADLINE_MS = 3_000;
/** While the workflow is missing: how often it is asked for again (one failed Update each). */
const MISSING_PROBE_MS = 1_000;

export interface WatchRouteSourceOptions extends TemporalSourceOptions {
  /** How often visibility is read while the routes workflow is missing. Default 15 s. */
  fallbackIntervalMs?: number;
  /** How often the missing routes workflow is asked for again. Default 1 s. */
  missingProbeMs?: number;
  routerId?: string;
}

function grpcCode(err: unknown): number | undefined {
  for (let e: unknown = err; typeof e === 'object' && e !== null; e = (e as { cause?: unknown }).cause) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number') return code;
  }
  return undefined;
}

function isUnreachable(err: unknown): boolean {
  const code = grpcCode(err);
  return code === grpc.status.UNAVAILABLE || code === grpc.status.DEADLINE_EXCEEDED || code === grpc.status.CANCELLED;
}

export class WatchRouteSource implements RouteSource {
  readonly description: string;
  readonly longPoll = true;
  private readonly lazy: LazyRoutesClient;
  private readonly routerId: string;
  /** Update ids must differ between processes that share a router id (a restart on the same address). */
  private readonly nonce: string;
  private table: RouteTable | undefined;
  private installedVersion = -1;
  private mode: 'watch' | 'fallback' = 'watch';
  private nextFallbackAt = 0;
  private calls = 0;
  private closed = false;
  private readonly abort = new AbortController();

  constructor(private readonly options: WatchRouteSourceOptions = {}) {
    this.routerId = options.routerId ?? `${hostname()}/${process.pid}`;
    this.nonce = `${process.pid}.${Date.now().toString(36)}`;
    this.lazy = new LazyRoutesClient(options.connect, options.onCall);
    if (options.description) this.description = options.description;
    else {
      const { address, namespace } = temporalConfig();
      this.description = `temporal ${address}/${namespace} (routes workflow)`;
    }
  }

  installed(version: number | undefined): void {
    if (version !== undefined) this.installedVersion = version;
  }

  async fetch(): Promise<RouteSnapshot> {
    const client = await this.lazy.get();
    try {
      for (;;) {
        // Without the workflow: ask for it again shortly, and read visibility at the slow interval.
        if (this.mode === 'fallback') await this.pause(Math.min(this.missingProbeMs(), this.nextFallbackAt - Date.now()));
        if (this.closed) throw new Error('the route source is closed');
        const table = await this.watch(client);
        if (table !== undefined) {
          this.table = table;
          return { routes: table.routes, deployments: table.deployments, version: table.version, epoch: table.epoch };
        }
        if (Date.now() < this.nextFallbackAt) continue;
        this.nextFallbackAt = Date.now() + this.fallbackMs();
        const routes = await client.connection.withDeadline(Date.now() + VISIBILITY_DEADLINE_MS, () =>
          readReplicaRoutes(client, (workflowId, message) => this.options.log?.(`router: ignoring ${workflowId}: ${message}`)),
        );
        return { routes, deployments: [] };
      }
    } catch (err) {
      if (this.closed) throw err;
      this.lazy.drop(client);
      throw err;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.abort.abort();
    await this.lazy.close();
  }

  /** The next table, or undefined when the routes workflow cannot be asked (missing, refusing). */
  private async watch(client: Client): Promise<RouteTable | undefined> {
    const handle = client.workflow.getHandle(ROUTES_WORKFLOW_ID);
    const request = {
      routerId: this.routerId,
      after: this.table?.version ?? -1,
      applied: this.installedVersion,
      ...(this.table ? { epoch: this.table.epoch } : {}),
    };
    // One id per long poll: an attempt that ends on its deadline is joined again, not repeated,
    // so a router never holds more than one of the workflow's in-flight Updates.
    const updateId = `${this.routerId}/${this.nonce}/${++this.calls}`;
    for (;;) {
      try {
        const table = await client.connection.withDeadline(Date.now() + ATTEMPT_MS, () =>
          handle.executeUpdate(watchRoutesUpdate, { args: [request], updateId }),
        );
        if (this.mode === 'fallback') this.options.log?.('router: the routes workflow answers again; visibility is no longer read');
        this.mode = 'watch';
        return table;
      } catch (err) {
        if (this.closed) throw err;
        // A long poll that outlived one attempt: join it again if the server is there.
        if (grpcCode(err) === grpc.status.DEADLINE_EXCEEDED && (await this.reachable(client))) continue;
        if (isUnreachable(err)) throw err;
        const message = err instanceof Error ? `${err.message} ${String(err.cause ?? '')}` : String(err);
        if (/continuing as new/.test(message)) continue;
        if (this.mode === 'watch') {
          this.options.log?.(
            `router: the routes workflow cannot be watched (${message.trim()}); reading visibility every ${this.fallbackMs() / 1000} s ` +
              `and asking for the workflow every ${this.missingProbeMs() / 1000} s`,
          );
          // Visibility at once, then at the slow interval.
          this.nextFallbackAt = Date.now();
        }
        this.mode = 'fallback';
        return undefined;
      }
    }
  }

  private pause(ms: number): Promise<void> {
    if (ms <= 0 || this.closed) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.abort.signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
    });
  }

  private fallbackMs(): number {
    return this.options.fallbackIntervalMs ?? 15_000;
  }

  private missingProbeMs(): number {
    return this.options.missingProbeMs ?? MISSING_PROBE_MS;
  }

  /** The client this source reads with (connected on demand): the autoscaler's Updates share its connection. */
  temporalClient(): Promise<Client> {
    return this.lazy.get();
  }

  /** One cheap call, to tell a long poll that ran out of time from a server that is gone. */
  private async reachable(client: Client): Promise<boolean> {
    try {
      await client.connection.withDeadline(Date.now() + PROBE_MS, () => client.workflowService.getSystemInfo({}));
      return true;
    } catch {
      return false;
    }
  }
}
