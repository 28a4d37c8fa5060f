// The `node` workflow (node/<nodeId>): the single writer of one host's GPUs. It holds what the
// agent registered (and the agent's current settings), watches the agent through one
// heartbeating presence activity on the host's queue, answers reserve/release/claim as
// Updates, keeps the host's reconcile Schedule in step with the agent's flags, and wakes
// waiting replicas when it gains capacity. Rules: state.ts; handlers: handlers.ts; loops:
// watchers.ts; what it shows and sends: publish.ts.
import { allHandlersFinished, CancellationScope, condition, workflowInfo } from '@temporalio/workflow';
import { DEFAULT_LOST_GRACE_SECONDS, type AgentSettings } from '../../common/node-types.js';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { handOverDue as handOverDueFor } from '../toolkit.js';
import { registerAgentHandlers, registerGpuHandlers } from './handlers.js';
import { createNodeOutbox } from './publish.js';
import { initialNodeState, type NodeState } from './state.js';
import { addNodeActions, startWatchers, type NodeContext } from './watchers.js';

export interface NodeWorkflowInput {
  nodeId: string;
  /** The agent's settings when it first registered; later registrations bring their own. */
  presenceHeartbeatSeconds?: number;
  lostGraceSeconds?: number;
  reconcileEverySeconds?: number;
  reconcileDryRun?: boolean;
  /** State carried over continue-as-new. */
  carried?: NodeState;
  /** Set by the hand-over to a new llmgw build (workflows/upgrade.ts). */
  upgrading?: boolean;
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
  const outbox = createNodeOutbox(state, { parked: Boolean(input.upgrading), carried: carried !== undefined });
  const ctx: NodeContext = {
    state,
    registerSeq: 0,
    continued: carried !== undefined,
    reconcileWanted: false,
    wakeWanted: false,
    publish: outbox.publish,
    parked: Boolean(input.upgrading),
  };
  // Every handler before the first await: a signal delivered with the run's first task runs
  // its handler before any loop starts.
  addNodeActions(ctx);
  ctx.tellReplicas = outbox.heldWhileParked(ctx.tellReplicas!);
  registerAgentHandlers(ctx, outbox.publishWeights);
  registerGpuHandlers(ctx);
  const upgrade = watchUpgrades();
  await upgrade.park(input.upgrading);
  ctx.parked = false;
  outbox.unpark();

  const handOverDue = handOverDueFor(upgrade, input.continueAsNewAfterEvents ?? HISTORY_LIMIT);
  const scope = new CancellationScope();
  const watchers = scope.run(() => startWatchers(ctx));
  watchers.catch(() => undefined);
  await condition(handOverDue);
  scope.cancel();
  await watchers.catch(() => undefined);
  await condition(allHandlersFinished);
  const upgrading = upgrade.requested();
  await continueAsNewWith<typeof node>(upgrading)({ ...input, carried: state, upgrading });
}
