// One model's requests at the router: the endpoints that may take them, the policy that picks
// among them, its metrics and its waiting line. engines/pools.ts builds them from the route
// table; the Exchange, the waiting room and the adapter router read them. Router side.
import type { ModelMetrics } from '../metrics.js';
import { pickLeastLoaded } from '../policies/least-loaded.js';
import type { PickRequest, RoutingPolicy } from '../policies/policy.js';
import type { Endpoint } from './endpoint.js';
import type { SleepingReplica } from '../routes/table.js';
import { ModelQueue } from '../flow/queue.js';

export class ModelPool {
  /** The served name as the JSON string a body carries, to put in place of a deployment alias. */
  readonly servedNameJson: Buffer;
  /** An adapter's pool (adapters/router.ts): an engine answered 404 for it, so it lost the adapter. */
  adapterLost: ((e: Endpoint) => void) | undefined = undefined;

  constructor(
    readonly servedName: string,
    readonly endpoints: Endpoint[],
    readonly policy: RoutingPolicy<Endpoint>,
    readonly metrics: ModelMetrics,
    /** Its waiting line at this router, which outlives table changes. */
    readonly queue: ModelQueue = new ModelQueue(servedName),
    /** Autoscaled or asleep: with no routable replica, a request is held (and wakes it) rather than refused. */
    readonly holds: boolean = false,
    /** The deployments behind it (their names are aliases of it): what an API key's scope may name. */
    readonly deployments: readonly string[] = [],
    /** Its sleeping replicas (routes/table.ts), the one to wake first; with no routable replica, a request is held and wakes it. */
    readonly sleepers: readonly SleepingReplica[] = [],
  ) {
    this.servedNameJson = Buffer.from(JSON.stringify(servedName));
  }

  /**
   * The endpoint for the next attempt: the first by the model's policy, a retry (`tried` set)
   * to the least-loaded endpoint not yet tried.
   */
  pick(request: EligiblePick, tried: Endpoint[] | undefined, now: number): Endpoint | undefined {
    if (tried !== undefined) return pickLeastLoaded(this.endpoints, tried, now);
    // Flow control's choice of replicas (room, a deadline) narrows the first attempt's.
    const eligible = request.eligible;
    if (eligible === undefined) return this.policy.pick(this.endpoints, request, now);
    const candidates = this.endpoints.filter(eligible);
    return this.policy.pick(candidates.length > 0 ? candidates : this.endpoints, request, now);
  }
}

/** A request as a pick sees it: its keys, and the replicas flow control allows it. */
export interface EligiblePick extends PickRequest {
  readonly eligible?: ((e: Endpoint) => boolean) | undefined;
}
