// Waking a sleeping replica for the requests held for it (docs/sleep.md, "The router"): when a
// model's only replicas sleep, the waiting room holds its requests and asks here; the first
// sleeper by replica id is woken through the `wakeReplica` Update on its workflow, once, however
// many requests wait and however often the line says so again. The requests leave when the route
// turns Ready (a new table drains the line) or at once if the Update finds it Ready already; a
// wake that fails answers them as a scale from zero answers on its timeout. Router side.
import type { WakeRequest, WakeResult } from '../../common/sleep-types.js';
import type { WakeMetrics } from '../metrics.js';
import type { ModelPool } from './model-pool.js';

/** Executes `wakeReplica` on a replica's workflow (the Temporal client in production; a counter in tests). Rejects when it failed. */
export type WakeCaller = (replicaId: string, request: WakeRequest) => Promise<WakeResult>;

/**
 * After a wake was answered, how long its replica may still show Sleeping before it is asked
 * again: the routes workflow publishes Ready on its way, and a second wake meanwhile would only
 * be a second Update in the replica's history. Past this, the wake is taken as lost and asked anew.
 */
export const WAKE_SETTLE_MS = 10_000;

export interface WakerHooks {
  lookup(model: string): ModelPool | undefined;
  /** Sends what waits for the model now that it may have a routable replica. */
  drain(model: string): void;
  /** The wake failed: answer what waits for the model. */
  failed(model: string): void;
  log(line: string): void;
}

export class SleeperWaker {
  /** Replica ids with a wake in flight from this process. */
  private readonly inFlight = new Set<string>();
  /** Replica ids whose wake was answered, and when (performance.now()). */
  private readonly answeredAt = new Map<string, number>();

  constructor(
    private readonly call: WakeCaller,
    /** `router:<router id>`: who asked, in the replica's history. */
    private readonly by: string,
    private readonly metrics: WakeMetrics,
    private readonly hooks: WakerHooks,
  ) {}

  /** Requests wait for this pool: wake its first sleeper, unless it has a routable replica or the wake is asked already. */
  ensure(pool: ModelPool): void {
    if (pool.endpoints.length > 0) return;
    const sleeper = pool.sleepers[0];
    if (sleeper === undefined) return;
    const id = sleeper.replicaId;
    if (this.inFlight.has(id)) return;
    const now = performance.now();
    for (const [replica, at] of this.answeredAt) if (now - at >= WAKE_SETTLE_MS) this.answeredAt.delete(replica);
    if (this.answeredAt.has(id)) return;
    this.inFlight.add(id);
    const model = pool.servedName;
    const request: WakeRequest = { by: this.by, reason: `requests for ${model} are held at the router` };
    let call: Promise<WakeResult>;
    try {
      call = this.call(id, request);
    } catch (err) {
      call = Promise.reject(err as Error);
    }
    call.then(
      (result) => {
        this.inFlight.delete(id);
        this.answeredAt.set(id, performance.now());
        this.metrics.wakeAsked(sleeper.deployment, result.alreadyAwake ? 'awake' : 'woken');
        this.hooks.log(`router: woke ${id} for ${model} in ${result.wokeInMs} ms${result.alreadyAwake ? ' (it was awake)' : ''}`);
        // Ready in this table already (the routes workflow was quicker than the Update's answer): send now.
        this.hooks.drain(model);
        // Still asleep in the table once the settling time is over: the line asks again then.
        setTimeout(() => this.hooks.drain(model), WAKE_SETTLE_MS + 50).unref();
      },
      (err: unknown) => {
        this.inFlight.delete(id);
        this.metrics.wakeAsked(sleeper.deployment, 'failed');
        this.hooks.log(`router: could not wake ${id} for ${model}: ${(err as Error).message}`);
        // Another replica may have turned Ready meanwhile: then what waits goes there.
        if ((this.hooks.lookup(model)?.endpoints.length ?? 0) > 0) this.hooks.drain(model);
        else this.hooks.failed(model);
      },
    );
  }
}
