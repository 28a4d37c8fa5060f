// The `node` workflow (node/<nodeId>): the single writer of one host's GPUs. It holds what the
// agent registered (and the agent's current settings), watches the agent through one
// heartbeating presence activity on the host's queue, answers reserve/release/claim as
// Updates, keeps the host's reconcile Schedule in step with the agent's flags, and wakes
// waiting replicas when it gains capacity. Rules: state.ts; watchers: watchers.ts.
import { allHandlersFinished, CancellationScope, condition, log, setHandler, upsertMemo, workflowInfo } from '@temporalio/workflow';
import { SA } from '../../common/search-attributes.js';
import { DEFAULT_LOST_GRACE_SECONDS, type AgentSettings } from '../../common/node-types.js';
import {
  agentHeardSignal,
  agentSilentSignal,
  agentStoppingSignal,
  runningShardsSignal,
  claimUpdate,
  clearGpuUpdate,
  cordonUpdate,
  describeNodeQuery,
  reconcileAllocationsUpdate,
  registerSignal,
  releaseUpdate,
  reserveUpdate,
  uncordonUpdate,
  weightsHeldSignal,
} from '../definitions.js';
import { HELD_WEIGHTS_MEMO } from '../../common/node-types.js';
import { clearGpu } from './clear-gpu.js';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { handOverDue as handOverDueFor } from '../toolkit.js';
import { createPublication } from '../publish.js';
import {
  applyRegister,
  claim,
  freeGpus,
  heldWeightKeys,
  initialNodeState,
  nodeDetails,
  reconcileAllocations,
  release,
  reserve,
  viewOf,
  type NodeState,
} from './state.js';
import { addNodeActions, markSilent, startWatchers, type NodeContext } from './watchers.js';

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
  const now = (): string => new Date().toISOString();
  // While parked for an upgrade the run must issue nothing (workflows/upgrade.ts): what the
  // handlers would publish meanwhile is published once the park ends.
  let holdCommands = Boolean(input.upgrading);
  let publishPending = !carried || workflowInfo().searchAttributes?.LlmgwState === undefined;
  const shown = createPublication();
  const ctx: NodeContext = {
    state,
    registerSeq: 0,
    continued: carried !== undefined,
    reconcileWanted: false,
    wakeWanted: false,
    publish() {
      if (holdCommands) {
        publishPending = true;
        return;
      }
      shown.attributes([
        { key: SA.state, value: state.cordoned ? 'Cordoned' : state.phase },
        { key: SA.freeGpus, value: freeGpus(state).length },
        { key: SA.gpuClass, value: state.inventory?.gpuClass || 'none' },
        { key: SA.nodes, value: [state.nodeId] },
      ]);
      shown.details(nodeDetails(state));
    },
  };

  // What the host holds goes into the memo, which placement reads with the capacity index (one
  // visibility call, no query per node). Written only when it changes: a fetch, an eviction.
  let memoPending = false;
  const publishWeights = (): void => {
    const keys = heldWeightKeys(state);
    const listed = workflowInfo().memo?.[HELD_WEIGHTS_MEMO];
    if (JSON.stringify(Array.isArray(listed) ? listed : []) === JSON.stringify(keys)) return;
    if (holdCommands) memoPending = true;
    else upsertMemo({ [HELD_WEIGHTS_MEMO]: keys });
  };

  addNodeActions(ctx);
  const tellReplicas = ctx.tellReplicas!;
  let tellPending = false;
  // Parked for an upgrade, the run issues nothing: the news goes out once the park ends.
  ctx.tellReplicas = () => {
    if (holdCommands) tellPending = true;
    else tellReplicas();
  };

  setHandler(registerSignal, (register, settings) => {
    const wasReady = state.phase === 'Ready';
    for (const note of applyRegister(state, register, now())) log.info(note, { nodeId: state.nodeId });
    if (settings) state.settings = { ...settings };
    state.silent = false;
    ctx.reported = undefined;
    ctx.registerSeq++;
    ctx.reconcileWanted = true;
    ctx.wakeWanted = true;
    ctx.publish();
    if (!wasReady) ctx.tellReplicas?.();
  });
  setHandler(runningShardsSignal, ({ shardIds }) => void (ctx.reported = [...shardIds].sort()));
  setHandler(weightsHeldSignal, ({ weights }) => {
    state.weights = weights.map((w) => ({ ...w, inUseBy: [...w.inUseBy] }));
    publishWeights();
  });
  setHandler(agentStoppingSignal, ({ reason }) => ctx.markNotReady?.(`the agent is stopping: ${reason}`));
  // The control worker watches the agent's worker heartbeats (workers/liveness.ts).
  setHandler(agentSilentSignal, ({ seconds }) => {
    if (state.phase !== 'Ready') return;
    // The sweep saw no heartbeat for `seconds`, but the agent registered since then (a restart
    // whose worker has not beaten yet): the silence counts from the registration instead
    // (watchClaimedSilence). A NotReady now would skip the wake-ups of GPUs freed meanwhile.
    const registeredAgo = state.lastRegisteredAt ? Date.now() - Date.parse(state.lastRegisteredAt) : Infinity;
    if (registeredAgo < seconds * 1000) ctx.silenceClaimed = seconds;
    else markSilent(ctx, seconds);
  });
  setHandler(agentHeardSignal, () => {
    ctx.silenceClaimed = undefined;
    if (!state.silent) return;
    state.silent = false;
    // Heard after it was declared Lost (a host back from a partition): its replicas run
    // elsewhere now, so reconcile at once, through the agent's worker, which is what was
    // heard; that stops the stale engines even before the agent registers again.
    if (state.phase === 'Lost') ctx.reconcileWanted = true;
    if (state.phase !== 'NotReady') return;
    state.phase = 'Ready';
    state.reason = 'the agent is heard again';
    state.notReadySince = undefined;
    ctx.publish();
    ctx.tellReplicas?.();
    // GPUs released while it was NotReady woke nobody (a NotReady node offers no room).
    ctx.wakeWanted = true;
  });
  setHandler(
    reserveUpdate,
    (request) => {
      const result = reserve(state, request, now());
      if (result.ok) ctx.publish();
      return result;
    },
    {
      validator: (request) => {
        if (!request.shardId) throw new Error('reserve needs a shardId');
        if (!Number.isInteger(request.count) || request.count < 0)
          throw new Error(`reserve count must be a whole number ≥ 0, got ${request.count}`);
      },
    },
  );
  // Waiting replicas are woken by the releaseGpus activity that sent this Update.
  setHandler(releaseUpdate, (request) => {
    const released = release(state, request.shardId);
    if (released) ctx.publish();
    return released;
  });
  setHandler(claimUpdate, (request) => {
    const result = claim(state, request, now());
    if (result.ok) ctx.publish();
    return result;
  });
  setHandler(cordonUpdate, ({ reason }) => {
    state.cordoned = true;
    state.reason = reason ? `cordoned: ${reason}` : 'cordoned';
    ctx.publish();
    return viewOf(state);
  });
  setHandler(clearGpuUpdate, ({ gpuIndex }) => clearGpu(state.nodeId, gpuIndex));
  setHandler(uncordonUpdate, () => {
    state.cordoned = false;
    state.reason = 'uncordoned';
    ctx.publish();
    ctx.wakeWanted = true;
    return viewOf(state);
  });
  setHandler(reconcileAllocationsUpdate, (request) => {
    const result = reconcileAllocations(state, request, now());
    if (result.claimed.length || result.released.length) ctx.publish();
    for (const conflict of result.conflicts) log.warn(conflict, { nodeId: state.nodeId });
    return result;
  });
  setHandler(describeNodeQuery, () => viewOf(state));
  const upgrade = watchUpgrades();
  await upgrade.park(input.upgrading);
  holdCommands = false;
  if (publishPending) ctx.publish();
  if (memoPending || (carried && state.weights)) publishWeights();
  if (tellPending) ctx.tellReplicas();

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
