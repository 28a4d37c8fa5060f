// What every step of a replica shares: its input, its state, the events its handlers queued,
// and how it publishes a phase (route memo, search attributes, details, the routes workflow,
// the deployment), each only when what its readers act on changed. Workflow side; the steps
// live in place.ts, start.ts, watch.ts, recovery.ts and drain.ts, the table in steps.ts.
import { awakeShareOf } from '../../common/placement/shared-gpus.js';
import { revisionOfSnapshot } from '../../common/revision.js';
import { getExternalWorkflowHandle, log } from '@temporalio/workflow';
import type { SearchAttributeUpdatePair } from '@temporalio/common';
import { SA } from '../../common/search-attributes.js';
import type { NodeStatusSignal } from '../../common/node-types.js';
import {
  COMING_UP_PHASES,
  ROUTABLE_PHASES,
  type DemandMemo,
  type ProfileSnapshot,
  type ReplicaInput,
  type ReplicaPhase,
  type ReplicaView,
  type RouteMemo,
} from '../../common/replica-types.js';
import type { ShardStatus } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { replicaStatusSignal } from '../definitions.js';
import { replicaDetails } from './details.js';
import { createPublication } from '../publish.js';
import { notifyRouteChanged } from '../routes/notify.js';
import type { SignalsInFlight } from '../signals-in-flight.js';
import { endpointOf, replicaView, type ReplicaState } from './state.js';
import type { Next } from './steps.js';
import type { SleepControl } from './sleep.js';

export type ReplicaEvent = { kind: 'shard'; status: ShardStatus } | { kind: 'node'; status: NodeStatusSignal };

export interface ReplicaContext {
  input: ReplicaInput;
  replicaId: string;
  profile: ProfileSnapshot;
  state: ReplicaState;
  /** Shard and node transitions, in arrival order. */
  events: ReplicaEvent[];
  /**
   * Set by a capacityChanged signal: GPUs were freed (hint: where; woken: every node since the
   * last look). `placing` while the place step looks or waits; wake-ups this replica does not
   * use are passed on by forwardUnusedWakes (place.ts).
   */
  capacity: { changed: boolean; hint: string | undefined; woken: string[]; placing?: boolean };
  /** The sleep and wake its Updates asked for and the steps have not answered yet (sleep.ts). */
  sleep: SleepControl;
  stopRequested(): boolean;
  /** The history is long enough (or a new build is Current) to hand over to a new run. */
  handOverDue(): boolean;
  /** Continues as new with the state as it is, the next run resuming at `resume` (steps.ts only). */
  handOver(resume: Next): Promise<never>;
  /**
   * Publishes a phase; a phase and reason that did not change publish nothing (no events).
   * `quiet`: only the details show it (no event); the next phase publishes everything.
   */
  setPhase(phase: ReplicaPhase, reason: string, options?: { quiet?: boolean }): Promise<void>;
  view(): ReplicaView;
}

export function createPublisher(
  input: ReplicaInput,
  replicaId: string,
  state: ReplicaState,
  now: () => string,
  alreadyPublished: boolean,
  routesInFlight: SignalsInFlight,
): ReplicaContext['setPhase'] {
  const profile = input.profile;
  // A phase and reason that did not change publish nothing, not even a log line.
  const keyOf = (): string => JSON.stringify([state.phase, state.reason, endpointOf(state.shards), state.shards.map((s) => s.nodeId)]);
  const attributesOf = (): SearchAttributeUpdatePair[] => [
    { key: SA.state, value: state.phase },
    { key: SA.deployment, value: input.deployment },
    { key: SA.model, value: profile.model },
    { key: SA.gpuClass, value: profile.gpuClass },
    { key: SA.nodes, value: [...new Set(state.shards.map((s) => s.nodeId))] },
  ];
  const memoKeyOf = (): string => memoKey(state.phase, endpointOf(state.shards));
  // What routers act on (through the routes workflow) and what the deployment acts on.
  const routeKeyOf = (): string => routeKey(state.phase, endpointOf(state.shards), revisionOfSnapshot(profile));
  const toldKeyOf = (): string => deploymentKey(state, endpointOf(state.shards));
  // A run continued from another starts with what its predecessor showed and sent; a new one
  // with nothing routed, and held by the deployment as Pending from the moment it was started.
  const shown = createPublication(
    alreadyPublished
      ? { attributes: attributesOf(), memoKey: memoKeyOf(), sent: { routes: routeKeyOf(), deployment: toldKeyOf(), phase: keyOf() } }
      : {
          sent: {
            routes: routeKey('Placing', '', ''),
            deployment: deploymentKey({ phase: 'Pending', reason: '', shards: [], restarts: 0, avoidNodes: [] }, ''),
          },
        },
  );
  return async (phase, reason, options) => {
    if (state.phase !== phase) state.since = now();
    state.phase = phase;
    state.reason = reason;
    if (options?.quiet) {
      shown.details(replicaDetails(replicaId, profile, state));
      return;
    }
    if (!shown.due('phase', keyOf())) return;
    log.info(`replica ${phase}: ${reason}`);
    const route: RouteMemo = {
      deployment: input.deployment,
      servedName: profile.servedName,
      endpoint: endpointOf(state.shards),
      phase,
      replicaId,
    };
    // What it waits for, so whoever frees GPUs can wake the replicas that would fit.
    const demand: DemandMemo | undefined =
      phase === 'Unschedulable'
        ? {
            gpuClass: profile.gpuClass,
            gpusPerNode: profile.gpusPerNode,
            nodes: profile.nodes,
            since: state.since,
            ...(profile.sleep ? { awakeShare: awakeShareOf(profile.engine, profile.args) } : {}),
          }
        : undefined;
    shown.memo({ route, demand }, memoKeyOf());
    shown.attributes(attributesOf());
    shown.details(replicaDetails(replicaId, profile, state));
    // Routers learn routes from the routes workflow (workflows/routes/), told of what they act on.
    if (shown.due('routes', routeKeyOf())) notifyRouteChanged({ ...route, revision: revisionOfSnapshot(profile) }, routesInFlight);
    if (!shown.due('deployment', toldKeyOf())) return;
    try {
      await getExternalWorkflowHandle(input.deploymentWorkflowId).signal(
        replicaStatusSignal,
        replicaView(replicaId, input.seq, state, revisionOfSnapshot(input.profile)),
      );
    } catch {
      // The deployment is gone (rebuilt later by reconciliation); the replica carries on.
    }
  };
}

/**
 * What a router acts on in a replica's route: routable at an endpoint and revision, gone,
 * asleep at an endpoint (held for, and woken), or neither (Placing, Starting, Loading,
 * Draining, Unschedulable are one to a router).
 */
function routeKey(phase: ReplicaPhase, endpoint: string, revision: string): string {
  if (phase === 'Stopped' || phase === 'Failed') return 'gone';
  if (phase === 'Sleeping') return `sleeping ${endpoint} ${revision}`;
  return endpoint !== '' && ROUTABLE_PHASES.includes(phase) ? `routable ${endpoint} ${revision}` : 'not routable';
}

/**
 * What the memo's readers act on: the router's visibility source (routable at an endpoint; it
 * takes a phase that is not routable from the search attributes) and whoever frees GPUs (the
 * demand of a replica waiting for them).
 */
function memoKey(phase: ReplicaPhase, endpoint: string): string {
  if (ROUTABLE_PHASES.includes(phase) || phase === 'Sleeping') return `${phase} ${endpoint}`;
  return phase === 'Unschedulable' ? 'waiting' : 'not routable';
}

/**
 * What a deployment acts on, or must show, in a replica's report: its phase, why and where; a
 * failure (a restart, a node to avoid) whenever one happens. The steps of a healthy start
 * (Placing, Starting, Loading) are one: they change no decision, and the replica's own view
 * names them.
 */
function deploymentKey(state: Pick<ReplicaState, 'phase' | 'reason' | 'shards' | 'restarts' | 'avoidNodes'>, endpoint: string): string {
  if (COMING_UP_PHASES.includes(state.phase)) return JSON.stringify(['coming up', state.restarts, state.avoidNodes]);
  return JSON.stringify([state.phase, state.reason, endpoint, state.shards.map((s) => s.nodeId)]);
}
