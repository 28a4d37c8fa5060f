// The fetch step's activity on a host's queue `agent/<nodeId>`: makes a pinned revision
// complete in this host's cache, heartbeating its progress (bytes done and total, rate, ETA,
// current files) as the activity's details, which `temporal workflow describe` and the Web UI
// show. Agent side.
import { Context } from '@temporalio/activity';
import type { ProfileSnapshot } from '../../common/replica-types.js';
import type { HostWeightsCache } from './host-cache.js';

export interface FetchWeightsInput {
  /** The pinned source (hf://ORG/NAME@<commit>). */
  modelSource: string;
  /** Who asked, for the log. */
  replicaId: string;
  /**
   * The signed revision that names `modelSource` (its ProfileSnapshot, signature included): an
   * agent with a catalog key fetches nothing else (fetch-check.ts).
   */
  profile?: ProfileSnapshot;
  /** A replica's fetch: its placement ticket for this node (signed only for a live revision). */
  ticket?: string;
  /** A prefetch's: the control worker's weights permit for this node (common/weights-permit.ts). */
  permit?: string;
}

export interface FetchWeightsResult {
  snapshotPath: string;
  bytesTotal: number;
  /** Bytes this host downloaded for this call (0 when cached, or when it joined another replica's fetch). */
  bytesFetched: number;
  /** true when another replica's fetch of the same revision was already under way here. */
  joined: boolean;
  fetched: { path: string; why: string }[];
  /** The activity's time, listing and linking included. */
  seconds: number;
  /** The downloads' time alone: bytesFetched / transferSeconds is the fetch's throughput (0 when nothing was downloaded here). */
  transferSeconds: number;
}

export function createWeightsActivities(cache: HostWeightsCache, log: (line: string) => void) {
  return {
    async fetchWeights(input: FetchWeightsInput): Promise<FetchWeightsResult> {
      const context = Context.current();
      const started = Date.now();
      const result = await cache.ensure(input.modelSource, context.cancellationSignal, (progress) => context.heartbeat(progress.details()));
      const seconds = (Date.now() - started) / 1000;
      log(
        `weights ${input.modelSource} for ${input.replicaId}: ${result.fetched.length === 0 ? 'complete in the cache' : `${result.fetched.length} file(s) fetched (${result.fetched.map((f) => `${f.path}: ${f.why}`).join(', ')})`}${result.joined ? ', shared with a fetch under way' : ''} in ${seconds.toFixed(1)} s`,
      );
      return {
        snapshotPath: result.snapshotPath,
        bytesTotal: result.bytesTotal,
        bytesFetched: result.joined ? 0 : result.bytesFetched,
        joined: result.joined,
        fetched: result.fetched,
        seconds,
        transferSeconds: result.joined ? 0 : result.transferSeconds,
      };
    },
  };
}

export type WeightsActivities = ReturnType<typeof createWeightsActivities>;
