// The node workflow's handlers, registered before its first await: what the agent and the
// liveness sweep tell it (registration, running shards, held weights, silence), and the GPU
// Updates placement, replicas and operators send (reserve, release, claim, cordon, clear); those
// that free or take GPUs only with the control worker's MAC (requests.ts).
// Workflow side; the rules they apply live in state.ts, the loops they wake in watchers.ts.
import { condition, log, setHandler } from '@temporalio/workflow';
import {
  agentHeardSignal,
  agentSilentSignal,
  agentStoppingSignal,
  awakeUpdate,
  claimUpdate,
  clearGpuUpdate,
  cordonUpdate,
  describeNodeQuery,
  reconcileAllocationsUpdate,
  registerSignal,
  releaseUpdate,
  reserveUpdate,
  runningShardsSignal,
  uncordonUpdate,
  weightsHeldSignal,
} from '../definitions.js';
import { clearGpu } from './clear-gpu.js';
import { acceptRegistration, registerEnrollHandler, type HeldRegistration } from './enrollment.js';
import { checkedRequest, validateProof } from './requests.js';
import { setAwake } from './shared-gpus.js';
import { applyRegister, claim, reconcileAllocations, release, reserve, viewOf } from './state.js';
import { markSilent, type NodeContext } from './watchers.js';

const now = (): string => new Date().toISOString();

/** What the agent and the liveness sweep report about the host. */
export function registerAgentHandlers(ctx: NodeContext, publishWeights: () => void): void {
  const { state } = ctx;
  const apply = ({ register, settings }: HeldRegistration): void => {
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
  };
  // Acted on only once verified: anyone who can write to the namespace can send this signal.
  setHandler(registerSignal, (register, settings, proof) =>
    acceptRegistration(ctx, { register, ...(settings ? { settings } : {}), ...(proof ? { proof } : {}) }, apply),
  );
  registerEnrollHandler(ctx, apply);
  setHandler(runningShardsSignal, ({ shardIds }) => void (ctx.reported = [...shardIds].sort()));
  // Kept as it came, signature and all: placement takes the list only where it verifies
  // (activities/weights-verdict.ts); the workflow sandbox has no Ed25519.
  setHandler(weightsHeldSignal, ({ weights, proof }) => {
    state.weights = weights.map((w) => ({ ...w, inUseBy: [...w.inUseBy] }));
    state.weightsProof = proof;
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
  setHandler(agentHeardSignal, () => heard(ctx));
}

function heard(ctx: NodeContext): void {
  const { state } = ctx;
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
}

/** The Updates that move GPUs between free, reserved and claimed, and the node's view. */
export function registerGpuHandlers(ctx: NodeContext): void {
  const { state } = ctx;
  // Until a carried state's seal is checked (workflows/carried.ts) nothing reads or changes it:
  // an Update waits (inline, so an opened run answers in the same step as before), the view throws.
  setHandler(
    reserveUpdate,
    async (request) => {
      if (!ctx.opened) await condition(() => ctx.opened);
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
  // Release, claim and reconcileAllocations free or take GPUs: only with the control worker's
  // MAC for this node (requests.ts), else a namespace member frees a live engine's GPUs.
  // Waiting replicas are woken by the releaseGpus activity that sent this Update.
  setHandler(
    releaseUpdate,
    async (request) => {
      await checkedRequest(ctx, 'release', request);
      const released = release(state, request.shardId);
      if (released) ctx.publish();
      return released;
    },
    { validator: (request) => validateProof(ctx, 'release', request) },
  );
  setHandler(
    claimUpdate,
    async (request) => {
      await checkedRequest(ctx, 'claim', request);
      const result = claim(state, request, now());
      if (result.ok) ctx.publish();
      return result;
    },
    { validator: (request) => validateProof(ctx, 'claim', request) },
  );
  // A sharing engine's wake permit, and its sleep giving the share back (shared-gpus.ts): MAC'd,
  // else a namespace member marks an awake engine asleep and another wakes onto its GPU.
  setHandler(
    awakeUpdate,
    async (request) => {
      await checkedRequest(ctx, 'awake', request);
      const result = setAwake(state, request, now());
      if (result.ok) ctx.publish();
      return result;
    },
    {
      validator: (request) => {
        if (typeof request?.shardId !== 'string' || typeof request.awake !== 'boolean')
          throw new Error('awake needs a shardId and awake: true or false');
        validateProof(ctx, 'awake', request);
      },
    },
  );
  setHandler(cordonUpdate, async ({ reason }) => {
    if (!ctx.opened) await condition(() => ctx.opened);
    state.cordoned = true;
    state.reason = reason ? `cordoned: ${reason}` : 'cordoned';
    ctx.publish();
    return viewOf(state);
  });
  setHandler(clearGpuUpdate, async ({ gpuIndex }) => {
    if (!ctx.opened) await condition(() => ctx.opened);
    return clearGpu(state.nodeId, gpuIndex);
  });
  setHandler(uncordonUpdate, async () => {
    if (!ctx.opened) await condition(() => ctx.opened);
    state.cordoned = false;
    state.reason = 'uncordoned';
    ctx.publish();
    ctx.wakeWanted = true;
    return viewOf(state);
  });
  setHandler(
    reconcileAllocationsUpdate,
    async (request) => {
      await checkedRequest(ctx, 'reconcileAllocations', request);
      const result = reconcileAllocations(state, request, now());
      if (result.claimed.length || result.released.length) ctx.publish();
      for (const conflict of result.conflicts) log.warn(conflict, { nodeId: state.nodeId });
      return result;
    },
    { validator: (request) => validateProof(ctx, 'reconcileAllocations', request) },
  );
  setHandler(describeNodeQuery, () => {
    if (!ctx.opened) throw new Error(`node ${state.nodeId} has not verified the state it was handed yet`);
    return viewOf(state);
  });
}
