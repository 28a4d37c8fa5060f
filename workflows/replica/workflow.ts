// The `replica` workflow (replica/<deployment>/<seq>): one replica's whole life. This file checks
// the input, registers the handlers and builds the context every step shares; the life itself
// is the table of steps in steps.ts: place (place.ts) → start and load (start.ts) → Ready
// (watch.ts) → drain (drain.ts), with recover (recovery.ts) and release in between. State is one
// plain object (state.ts) that crosses continue-as-new, which only the step loop starts.
import { revisionOfSnapshot } from '../../common/revision.js';
import { allHandlersFinished, ApplicationFailure, condition, setHandler, workflowInfo } from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import type { ReplicaInput, ReplicaView } from '../../common/replica-types.js';
import { capacityChangedSignal, nodeStatusSignal, replicaStatusQuery, shardTransitionSignal, stopReplicaSignal } from '../definitions.js';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { refusedCarried, sealForNextRun } from '../carried.js';
import { signalsInFlight } from '../signals-in-flight.js';
import { createPublisher, type ReplicaContext, type ReplicaEvent } from './context.js';
import { ReplicaInputSchema } from './input.js';
import { describeIssues, handOverDue } from '../toolkit.js';
import { forwardUnusedWakes } from './place.js';
import { carriedReplicaState, initialReplicaState, replicaView } from './state.js';
import { registerSleepHandlers } from './sleep.js';
import { firstStep, runSteps } from './steps.js';

/** Hand over to a new run after this many events, if the server has not suggested it sooner. */
const HISTORY_LIMIT = 3_000;

export type { ReplicaState } from './state.js';

export async function replica(rawInput: ReplicaInput): Promise<ReplicaView> {
  const parsed = ReplicaInputSchema.safeParse(rawInput);
  if (!parsed.success) {
    throw ApplicationFailure.nonRetryable(`invalid replica input: ${describeIssues(parsed.error)}`, FailureType.InvalidInput);
  }
  const input = parsed.data as ReplicaInput;
  const info = workflowInfo();
  // Carried state is ours alone: honouring it in a run someone started by hand would let them
  // skip placement and claim any GPUs.
  if (input.carried !== undefined && !info.continuedFromExecutionRunId) {
    throw ApplicationFailure.nonRetryable(
      'invalid replica input: carried is internal state of a continued run; leave it out',
      FailureType.InvalidInput,
    );
  }
  const now = (): string => new Date().toISOString();
  const replicaId = info.workflowId;
  const carried = input.carried !== undefined;
  const state = carried ? carriedReplicaState(input.carried) : initialReplicaState(input, now());
  // Until its seal is checked (after the park, which every build issues alike), carried state is
  // a claim: the status query, which signRoutes and reconciliation act on, does not answer.
  let opened = !carried;
  const events: ReplicaEvent[] = [];
  const capacity = { changed: false, hint: undefined as string | undefined, woken: [] as string[] };
  const stopRequested = (): boolean => state.stopReason !== undefined;

  setHandler(shardTransitionSignal, (status) => void events.push({ kind: 'shard', status }));
  setHandler(nodeStatusSignal, (status) => void events.push({ kind: 'node', status }));
  setHandler(capacityChangedSignal, ({ nodeId }) => {
    capacity.changed = true;
    capacity.hint = nodeId;
    if (!capacity.woken.includes(nodeId)) capacity.woken.push(nodeId);
  });
  setHandler(stopReplicaSignal, ({ reason }) => void (state.stopReason ??= reason));
  setHandler(replicaStatusQuery, () => {
    if (!opened) throw new Error(`${replicaId} has not verified the state it was handed yet`);
    return replicaView(replicaId, input.seq, state, revisionOfSnapshot(input.profile));
  });
  const upgrade = watchUpgrades();
  const routesInFlight = signalsInFlight();

  const ctx: ReplicaContext = {
    input,
    replicaId,
    profile: input.profile,
    state,
    events,
    capacity,
    sleep: {},
    stopRequested,
    handOverDue: handOverDue(upgrade, input.continueAsNewAfterEvents ?? HISTORY_LIMIT),
    async handOver(resume) {
      await condition(allHandlersFinished);
      const next = await sealForNextRun(
        () => ({ ...input, carried: { ...state, resume }, upgrading: upgrade.requested() }),
        routesInFlight.allSent,
      );
      return continueAsNewWith<typeof replica>(next.upgrading)(next);
    },
    // A continued run starts with the memo and search attributes its predecessor wrote.
    setPhase: createPublisher(input, replicaId, state, now, carried && info.memo?.route !== undefined, routesInFlight),
    view: () => replicaView(replicaId, input.seq, state, revisionOfSnapshot(input.profile)),
  };
  registerSleepHandlers(ctx, () => opened);
  await upgrade.park(input.upgrading);
  const refused = carried ? await refusedCarried(rawInput) : undefined;
  if (refused !== undefined) {
    // Nothing it holds is ours: it places, starts and routes nothing. A replica of ours whose
    // engines still run is rebuilt around them by reconciliation, which counts this end as a
    // lost workflow (activities/reconcile-facts.ts).
    throw ApplicationFailure.nonRetryable(
      `carried state refused (${refused}): this run acts on none of it; reconciliation rebuilds the replica from its agents`,
      FailureType.CarriedStateRefused,
    );
  }
  opened = true;
  forwardUnusedWakes(ctx);
  // A continued run whose memo did not come along publishes its state again (a no-op otherwise).
  if (carried) void ctx.setPhase(state.phase, state.reason);
  const first = firstStep(state, { carried, adopting: Boolean(input.adopt?.length) });
  state.resume = undefined;
  try {
    return await runSteps(ctx, first);
  } finally {
    // A Stopped or Failed route not yet told to the routes workflow would be dropped with this run.
    await condition(routesInFlight.allSent);
  }
}
