// A stand-in for the replica workflow, for the router's Temporal test: it publishes the same
// `route` memo and search attributes a replica does, and changes phase when signalled, with no
// placement, agents or engines of its own. Registered as type `replica` by
// fake-replica-as-replica.ts, so the router finds it with its real query.
import { condition, defineSignal, setHandler, upsertMemo, upsertSearchAttributes } from '@temporalio/workflow';
import type { ReplicaPhase, RouteMemo } from '../../common/replica-types.js';
import { SA } from '../../common/search-attributes.js';

export interface FakeReplicaInput {
  deployment: string;
  servedName: string;
  model: string;
  replicaId: string;
  phase: ReplicaPhase;
  endpoint: string;
}

export const setFakeReplicaPhaseSignal = defineSignal<[{ phase: ReplicaPhase; endpoint?: string }]>('setFakeReplicaPhase');

export async function fakeReplica(input: FakeReplicaInput): Promise<void> {
  let route: RouteMemo = {
    deployment: input.deployment,
    servedName: input.servedName,
    endpoint: input.endpoint,
    phase: input.phase,
    replicaId: input.replicaId,
  };
  // Published in the handler, so the change is in the workflow task that takes the signal, as
  // the real replica's setPhase does.
  const publish = (): void => {
    upsertMemo({ route });
    upsertSearchAttributes([
      { key: SA.state, value: route.phase },
      { key: SA.deployment, value: route.deployment },
      { key: SA.model, value: input.model },
    ]);
  };
  setHandler(setFakeReplicaPhaseSignal, ({ phase, endpoint }) => {
    route = { ...route, phase, endpoint: endpoint ?? route.endpoint };
    publish();
  });
  publish();
  await condition(() => route.phase === 'Stopped' || route.phase === 'Failed');
}
