// The `node` workflow (node/<nodeId>): the single writer of one host's GPUs. It holds what the
// agent registered (and the agent's current settings), watches the agent through one
// heartbeating presence activity on the host's queue, answers reserve/release/claim as
// Updates, keeps the host's reconcile Schedule in step with the agent's flags, and wakes
// waiting replicas when it gains capacity. Rules: state.ts; handlers: handlers.ts; loops:
// watchers.ts; what it shows and sends: publish.ts. What it carries into its next run is sealed
// (workflows/carried.ts): a run whose carried state does not verify starts from nothing.
import { allHandlersFinished, CancellationScope, condition, workflowInfo } from '@temporalio/workflow';
import { DEFAULT_LOST_GRACE_SECONDS, type AgentSettings } from '../../common/node-types.js';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { refusedCarried, sealForNextRun, type SealedInput } from '../carried.js';
import { signalsInFlight } from '../signals-in-flight.js';
import { handOverDue as handOverDueFor } from '../toolkit.js';
import { registerAgentHandlers, registerGpuHandlers } from './handlers.js';
import { createNodeOutbox } from './publish.js';
import { initialNodeState, type NodeState } from './state.js';
import { addNodeActions, startWatchers, type NodeContext } from './watchers.js';

export interface NodeWorkflowInput extends SealedInput {
  nodeId: string;
  /** The agent's settings when it first registered; later registrations bring their own. */
  presenceHeartbeatSeconds?: number;
  lostGraceSeconds?: number;
  reconcileEverySeconds?: number;
  reconcileDryRun?: boolean;
  /** State carried over continue-as-new; honoured only when its seal verifies (workflows/carried.ts). */
  carried?: NodeState;
  /** Tests: hand over after this many history events. */
  continueAsNewAfterEvents?: number;
}

const HISTORY_LIMIT = 4_000;

export function settingsFrom(input: Partial<AgentSettings>): AgentSettings {
  return {
    presenceHeartbeatSeconds: input.presenceHeartbeatSeconds ?? 10,
    lostGraceSeconds: input.lostGraceSeconds ?? DEFAULT_LOST_GRACE_SECONDS,
    reconcileEverySeconds: input.reconcileEverySeconds ?? 3600,
    reconcileDryRun: input.reconcileDryRun ?? false,
  };
}

export async function node(input: NodeWorkflowInput): Promise<void> {
  const carried = input.carried !== undefined && workflowInfo().continuedFromExecutionRunId ? input.carried : undefined;
  const state: NodeState = carried ?? initialNodeState(input.nodeId);
  state.released ??= [];
  state.waiters = [];
  state.settings ??= settingsFrom(input);
  // Carried state is a claim until its seal is checked, after the park (which every build issues
  // alike): until then the run is held as if parked, its GPU Updates wait and its view does not
  // answer, so neither placement nor a ticket or route signer reads an unchecked address.
  const held = Boolean(input.upgrading) || carried !== undefined;
  const outbox = createNodeOutbox(state, { parked: held, carried: carried !== undefined });
  const ctx: NodeContext = {
    state,
    registerSeq: 0,
    continued: carried !== undefined,
    reconcileWanted: false,
    wakeWanted: false,
    publish: outbox.publish,
    parked: held,
    opened: carried === undefined,
    tellsInFlight: signalsInFlight(),
  };
  // Every handler before the first await: a signal delivered with the run's first task runs
  // its handler before any loop starts.
  addNodeActions(ctx);
  ctx.tellReplicas = outbox.heldWhileParked(ctx.tellReplicas!);
  registerAgentHandlers(ctx, outbox.publishWeights);
  registerGpuHandlers(ctx);
  const upgrade = watchUpgrades();
  await upgrade.park(input.upgrading);
  const refused = carried ? await refusedCarried(input) : undefined;
  if (refused !== undefined) startFromNothing(ctx, input);
  ctx.opened = true;
  ctx.parked = false;
  outbox.unpark();
  // What the predecessor (or whoever continued into this run) showed is replaced.
  if (refused !== undefined) {
    outbox.publish();
    outbox.publishWeights();
  }

  const handOverDue = handOverDueFor(upgrade, input.continueAsNewAfterEvents ?? HISTORY_LIMIT);
  const scope = new CancellationScope();
  const watchers = scope.run(() => startWatchers(ctx));
  watchers.catch(() => undefined);
  await condition(handOverDue);
  scope.cancel();
  await watchers.catch(() => undefined);
  await condition(allHandlersFinished);
  const next = await sealForNextRun(() => ({ ...input, carried: state, upgrading: upgrade.requested() }), ctx.tellsInFlight.allSent);
  await continueAsNewWith<typeof node>(next.upgrading === true)(next);
}

/**
 * A run that refused what it was handed keeps none of it: no registration, enrollment or
 * allocation. It is Registering, so nothing is placed here, and its first presence asks the
 * agent to register at once (watchers.ts): the agent's signed registration brings the address
 * back and, from the shards it reports running, the allocations of engines that run; the
 * reconciliation that registration starts settles the rest. Until then a GPU that a live engine
 * holds is refused by the agent itself (agent/supervisor/start/start-checks.ts).
 */
function startFromNothing(ctx: NodeContext, input: NodeWorkflowInput): void {
  const { state } = ctx;
  // In place: the handlers hold this very object.
  for (const key of Object.keys(state)) delete (state as unknown as Record<string, unknown>)[key];
  Object.assign(state, initialNodeState(input.nodeId), { settings: settingsFrom(input) });
  ctx.continued = false;
  ctx.askToRegister = true;
}
