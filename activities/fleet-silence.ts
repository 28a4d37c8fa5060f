// How much of the fleet is silent now, for the node workflow's Lost decision: read from the
// liveness sweep of this control worker (workers/liveness.ts), which reads the agents' worker
// heartbeats anyway, so asking costs no read of its own. Control side.
import type { FleetLiveness } from '../workers/liveness.js';

/** What the node workflow is told; undefined when this worker has no recent sweep to go by. */
export interface FleetSilence {
  /** Registered nodes whose agents heartbeat now. */
  heard: number;
  /** Registered nodes whose agents stopped heartbeating without shutting down. */
  silent: number;
  /** How old the sweep is (ms). */
  ageMs: number;
}

/** A sweep older than this (a stalled sweeper, a server without ListWorkers) says nothing. */
const STALE_AFTER_MS = 30_000;

/** The latest sweep's view, shared between the sweeper and the activity. */
export function createLivenessBoard(): { set(view: FleetLiveness): void; latest(): FleetLiveness | undefined } {
  let latest: FleetLiveness | undefined;
  return { set: (view) => void (latest = view), latest: () => latest };
}

export function createFleetSilenceActivities(latest: () => FleetLiveness | undefined = () => undefined) {
  return {
    async fleetSilence(): Promise<FleetSilence | undefined> {
      const view = latest();
      if (!view) return undefined;
      const ageMs = Math.max(0, Date.now() - view.at);
      if (ageMs > STALE_AFTER_MS) return undefined;
      return { heard: view.heard.length, silent: view.silent.length, ageMs };
    },
  };
}
