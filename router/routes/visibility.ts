// Routes learned from Temporal: every running `replica` workflow's `route` memo and LlmgwState,
// read from visibility. Router side; the replica workflow is the writer.
//
// Why polling visibility, and not signals or queries to each replica:
// - One List call per poll covers every deployment (paged), so the cost is flat in the number
//   of deployments and replicas, and nothing is asked of the workflows themselves: querying
//   hundreds of replicas each poll would wake each one's worker, and pushing to routers would
//   make every replica know about every router.
// - The memo and search attributes are written in the same workflow task as the phase change,
//   so they land together in one visibility record; the dev server and clusters with advanced
//   visibility show them within a fraction of a second. A 500 ms poll then keeps "Ready is
//   routable within 1 s" and "Draining gets nothing new within 1 s".
// - Visibility is eventually consistent, and the router must survive Temporal being down, so a
//   failed poll keeps the last table (RouteRefresher) rather than emptying it.
import type { Client } from '@temporalio/client';
import { z } from 'zod';
import { WorkflowType } from '../../common/names.js';
import { REPLICA_PHASES, type ReplicaPhase } from '../../common/replica-types.js';
import { SA } from '../../common/search-attributes.js';
import { temporalConfig } from '../../temporal/connection.js';
import { LazyRoutesClient, type TemporalSourceOptions } from './temporal-client.js';
import { isEndpointUrl, isRoutable, type RouteEntry, type RouteSnapshot, type RouteSource } from './table.js';

const Phase = z.enum(REPLICA_PHASES);

/** The `route` memo a replica workflow publishes (common/replica-types.ts RouteMemo). */
const RouteMemo = z.object({
  deployment: z.string().min(1),
  servedName: z.string().min(1),
  endpoint: z.string(),
  phase: Phase,
  replicaId: z.string(),
});

export const REPLICA_ROUTES_QUERY = `WorkflowType = '${WorkflowType.replica}' AND ExecutionStatus = 'Running'`;
const POLL_DEADLINE_MS = 3000;
const PAGE_SIZE = 1000;

/**
 * A RouteSource over Temporal visibility. Connecting is lazy and retried on every poll, so a
 * router started while Temporal is down comes up (serving 404/503) and finds its routes later.
 */
export class TemporalRouteSource implements RouteSource {
  readonly description: string;
  private readonly lazy: LazyRoutesClient;
  private readonly warned = new Set<string>();
  /** Said once per replica, not every poll. */
  private readonly warn = (workflowId: string, message: string): void => {
    if (this.warned.has(workflowId)) return;
    this.warned.add(workflowId);
    this.options.log?.(`router: ignoring ${workflowId}: ${message}`);
  };

  constructor(private readonly options: TemporalSourceOptions = {}) {
    this.lazy = new LazyRoutesClient(options.connect, options.onCall);
    if (options.description) this.description = options.description;
    else {
      const { address, namespace } = temporalConfig();
      this.description = `temporal ${address}/${namespace}`;
    }
  }

  async fetch(): Promise<RouteSnapshot> {
    const client = await this.lazy.get();
    try {
      const routes = await client.connection.withDeadline(Date.now() + POLL_DEADLINE_MS, () => readReplicaRoutes(client, this.warn));
      return { routes, deployments: [] };
    } catch (err) {
      this.lazy.drop(client);
      throw err;
    }
  }

  async close(): Promise<void> {
    await this.lazy.close();
  }

  /** The client this source reads with (connected on demand): the autoscaler's Updates share its connection. */
  temporalClient(): Promise<Client> {
    return this.lazy.get();
  }
}

/**
 * Every running replica's route as visibility shows it (paged). `warn` hears about a replica whose
 * memo is malformed (once per replica is the caller's business).
 */
export async function readReplicaRoutes(client: Client, warn: (workflowId: string, message: string) => void): Promise<RouteEntry[]> {
  const entries: RouteEntry[] = [];
  for await (const execution of client.workflow.list({ query: REPLICA_ROUTES_QUERY, pageSize: PAGE_SIZE })) {
    const entry = routeFromMemo(execution.workflowId, execution.memo?.route, execution.typedSearchAttributes.get(SA.state), warn);
    if (entry) entries.push(entry);
  }
  return entries;
}

/**
 * One replica's route, or undefined when its memo is missing (a replica that has not published
 * yet) or malformed.
 */
export function routeFromMemo(
  workflowId: string,
  memo: unknown,
  state: string | undefined,
  warn: (workflowId: string, message: string) => void,
): RouteEntry | undefined {
  if (memo === undefined) return undefined;
  const parsed = RouteMemo.safeParse(memo);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    warn(workflowId, `route memo ${issue ? `${issue.path.join('.')}: ${issue.message}` : 'invalid'}`);
    return undefined;
  }
  const route = parsed.data;
  if (route.endpoint !== '' && !isEndpointUrl(route.endpoint.replace(/\/$/, ''))) {
    warn(workflowId, `publishes an endpoint the router cannot use: "${route.endpoint}"`);
  }
  // Both are written in the same workflow task, so they should agree; if they ever do not,
  // the one that says "not routable" wins, because sending a request to a draining replica
  // is worse than waiting one more poll for a ready one.
  const saPhase = Phase.safeParse(state);
  const phase: ReplicaPhase = saPhase.success && !isRoutable(saPhase.data) ? saPhase.data : route.phase;
  return {
    deployment: route.deployment,
    servedName: route.servedName,
    endpoint: route.endpoint.replace(/\/$/, ''),
    phase,
    replicaId: route.replicaId || workflowId,
  };
}
