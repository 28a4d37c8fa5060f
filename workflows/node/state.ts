// The node workflow's state and the pure rules that change it: registration,
// reserve/release/claim of GPUs. Kept apart from the workflow function so the rules
// read on their own and are unit-tested without a server.
import type { Register } from '../../proto/gen/llmgw/v1/register_pb.js';
import { ShardState } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { inventoryFromRegister } from '../../common/register-conversion.js';
import { chooseGpus } from '../../common/placement/choose-gpus.js';
import { gpuAvailability } from '../../common/placement/shared-gpus.js';
import type {
  AgentEnrollment,
  AgentSettings,
  Allocation,
  ClaimRequest,
  ClaimResult,
  HeldWeights,
  NodeInventory,
  NodePhase,
  NodeView,
  ReconcileAllocationsRequest,
  ReconcileAllocationsResult,
  ReserveRequest,
  ReserveResult,
} from '../../common/node-types.js';
import { heldWeightsKey } from '../../common/node-types.js';
import { unenrolledReason } from './enrollment-reason.js';
import { mayShareWith, restoredSharing, sharedGpusOf, sharingFields } from './shared-gpus.js';
import type { FleetSilence } from '../../activities/fleet-silence.js';

export interface NodeState {
  nodeId: string;
  phase: NodePhase;
  reason: string;
  cordoned: boolean;
  inventory: NodeInventory | undefined;
  allocations: Allocation[];
  lastRegisteredAt: string | undefined;
  notReadySince: string | undefined;
  registrations: number;
  /** Runs of the release before Worker Versioning woke these replicas; kept so carried state stays whole. */
  waiters: string[];
  /** The agent's settings as of its latest registration. */
  settings?: AgentSettings;
  /** The settings the reconcile Schedule was last made to match (JSON), if any. */
  scheduleSettings?: string;
  /** NotReady because the control worker stopped hearing the agent's worker heartbeats. */
  silent?: boolean;
  /**
   * Shards released recently. An agent's report can be taken just before a stop
   * finishes; without this, that report would hand the released GPUs back to a
   * shard that is going away.
   */
  released: string[];
  /** The weights the host's cache holds, as its agent last reported (weightsHeld signal). */
  weights?: HeldWeights[];
  /** The agent's signature over `weights`, as it came (absent: unsigned). */
  weightsProof?: string;
  /** The operator's enrollment of the agent's key (enrollment.ts); absent: unenrolled. */
  enrollment?: AgentEnrollment;
  /** The inventory came from a registration the enrolled key signed: only then is anything placed here. */
  enrolled?: boolean;
  /** When the registration acted on last was signed: an older one is a replay. */
  lastSignedAt?: string;
  /** The key the latest registration applied unenrolled was signed with (what to enroll). */
  offeredKey?: string;
}

export function initialNodeState(nodeId: string): NodeState {
  return {
    nodeId,
    phase: 'Registering',
    reason: 'waiting for the agent to register',
    cordoned: false,
    inventory: undefined,
    allocations: [],
    lastRegisteredAt: undefined,
    notReadySince: undefined,
    registrations: 0,
    waiters: [],
    released: [],
  };
}

export function allocatedGpus(state: NodeState): number[] {
  return state.allocations.flatMap((allocation) => allocation.gpuIndices);
}

export function freeGpus(state: NodeState): number[] {
  if (!state.inventory) return [];
  const taken = allocatedGpus(state);
  return state.inventory.gpus
    .filter((gpu) => state.inventory!.managedGpus.includes(gpu.index) && !gpu.problems.length && !taken.includes(gpu.index))
    .map((gpu) => gpu.index);
}

/**
 * Applies an agent's registration. Shards the agent reports alive hold their GPUs even
 * if this workflow had forgotten them (a Lost node that came back, a rebuilt workflow):
 * a GPU in use by a running engine must never look free to placement.
 */
export function applyRegister(state: NodeState, register: Register, now: string): string[] {
  const notes: string[] = [];
  state.inventory = inventoryFromRegister(register);
  for (const running of register.runningShards) {
    const spec = running.spec;
    const status = running.status;
    if (!spec || !status) continue;
    if (status.state === ShardState.STOPPED || (status.state === ShardState.FAILED && status.exitCode !== undefined)) continue;
    if (state.allocations.some((allocation) => allocation.shardId === spec.shardId)) continue;
    if (state.released.includes(spec.shardId)) continue;
    const taken = allocatedGpus(state);
    const overlap = spec.gpuIndices.filter((index) => taken.includes(index));
    const sharing = restoredSharing(running, now);
    const beside = state.allocations.filter((a) => a.gpuIndices.some((index) => overlap.includes(index)));
    if (overlap.length && !mayShareWith(sharing, beside)) {
      notes.push(`shard ${spec.shardId} runs on GPUs ${overlap.join(',')} that are allocated to another shard; reconciliation decides`);
      continue;
    }
    state.allocations.push({
      shardId: spec.shardId,
      replicaId: spec.replicaId,
      gpuIndices: [...spec.gpuIndices],
      hcas: [...spec.hcas],
      since: now,
      via: 'report',
      ...sharing,
    });
    notes.push(`shard ${spec.shardId} reported running on GPUs ${spec.gpuIndices.join(',')}: allocation restored`);
  }
  state.phase = 'Ready';
  state.reason = register.problems.length ? `registered with problems: ${register.problems.join('; ')}` : 'agent registered';
  state.notReadySince = undefined;
  state.lastRegisteredAt = now;
  state.registrations++;
  return notes;
}

export function reserve(state: NodeState, request: ReserveRequest, now: string): ReserveResult {
  state.released = state.released.filter((id) => id !== request.shardId);
  const existing = state.allocations.find((allocation) => allocation.shardId === request.shardId);
  if (existing) {
    return {
      ok: true,
      nodeId: state.nodeId,
      gpuIndices: [...existing.gpuIndices],
      hcas: [...existing.hcas],
      managementAddress: state.inventory?.managementAddress ?? '',
    };
  }
  const reject = (reason: string): ReserveResult => ({ ok: false, nodeId: state.nodeId, reason });
  if (state.phase !== 'Ready' || !state.inventory) return reject(`node ${state.nodeId} is ${state.phase}`);
  if (state.cordoned) return reject(`node ${state.nodeId} is cordoned`);
  if (!state.enrolled && !request.allowUnenrolled) return reject(`node ${state.nodeId} is ${unenrolledReason(state)}`);
  if (request.gpuClass && state.inventory.gpuClass !== request.gpuClass)
    return reject(`node ${state.nodeId} has ${state.inventory.gpuClass || 'no'} GPUs, not ${request.gpuClass}`);
  const share = request.awakeShare! > 0 && request.awakeShare! <= 1 ? request.awakeShare : undefined; // a sharer: shared-gpus.ts
  const { blocked, occupied } = gpuAvailability(state.allocations, share);
  const choice = chooseGpus(state.inventory.gpus, state.inventory.managedGpus, blocked, {
    count: request.count,
    minFreeMemoryMib: request.minFreeMemoryMib,
    occupied,
  });
  if (!choice.ok) return reject(`node ${state.nodeId} ${choice.reason}`);
  state.allocations.push({
    shardId: request.shardId,
    replicaId: request.replicaId,
    gpuIndices: choice.gpuIndices,
    hcas: choice.hcas,
    since: now,
    via: 'reserve',
    ...sharingFields(share, now),
  });
  return {
    ok: true,
    nodeId: state.nodeId,
    gpuIndices: choice.gpuIndices,
    hcas: choice.hcas,
    managementAddress: state.inventory.managementAddress,
  };
}

export function release(state: NodeState, shardId: string): boolean {
  const before = state.allocations.length;
  state.allocations = state.allocations.filter((allocation) => allocation.shardId !== shardId);
  if (!state.released.includes(shardId)) state.released = [...state.released.slice(-199), shardId];
  return state.allocations.length !== before;
}

export function claim(state: NodeState, request: ClaimRequest, now: string): ClaimResult {
  const existing = state.allocations.find((allocation) => allocation.shardId === request.shardId);
  if (existing) {
    const same =
      existing.gpuIndices.length === request.gpuIndices.length && existing.gpuIndices.every((index) => request.gpuIndices.includes(index));
    return same ? { ok: true } : { ok: false, reason: `shard ${request.shardId} already holds GPUs ${existing.gpuIndices.join(',')}` };
  }
  const holders = state.allocations.filter((allocation) => allocation.gpuIndices.some((index) => request.gpuIndices.includes(index)));
  if (holders.length)
    return { ok: false, reason: `GPUs ${request.gpuIndices.join(',')} are held by ${holders.map((h) => h.shardId).join(', ')}` };
  state.allocations.push({
    shardId: request.shardId,
    replicaId: request.replicaId,
    gpuIndices: [...request.gpuIndices],
    hcas: [],
    since: now,
    via: 'claim',
  });
  return { ok: true };
}

/**
 * Makes the allocations match what reconciliation found: each reported engine holds
 * exactly its GPUs, and shards nothing runs give theirs back. An engine really running on
 * GPUs outranks a reservation nothing runs on yet: the reservation is dropped and named.
 */
export function reconcileAllocations(state: NodeState, request: ReconcileAllocationsRequest, now: string): ReconcileAllocationsResult {
  const result: ReconcileAllocationsResult = { claimed: [], released: [], conflicts: [], allocations: [] };
  for (const shardId of request.releases) if (release(state, shardId)) result.released.push(shardId);
  const claimedIds = new Set(request.claims.map((c) => c.shardId));
  for (const wanted of request.claims) {
    // Released after the report was taken (its replica stopped it meanwhile): claiming it
    // back would hold GPUs that nothing will use. If its engine still ran, the next
    // reconciliation stops it.
    if (state.released.includes(wanted.shardId)) {
      result.conflicts.push(`shard ${wanted.shardId} was released after the report was taken; not claimed again`);
      continue;
    }
    const existing = state.allocations.find((a) => a.shardId === wanted.shardId);
    if (
      existing &&
      existing.gpuIndices.length === wanted.gpuIndices.length &&
      existing.gpuIndices.every((i) => wanted.gpuIndices.includes(i))
    )
      continue;
    // Sharers beside each other are no conflict (shared-gpus.ts).
    const others = state.allocations.filter(
      (a) => a.shardId !== wanted.shardId && a.gpuIndices.some((i) => wanted.gpuIndices.includes(i)) && !mayShareWith(wanted, [a]),
    );
    const running = others.filter((a) => claimedIds.has(a.shardId));
    if (running.length) {
      result.conflicts.push(
        `shard ${wanted.shardId} and ${running.map((a) => a.shardId).join(', ')} both report GPUs ${wanted.gpuIndices.join(',')}; left as it was`,
      );
      continue;
    }
    for (const other of others) {
      result.conflicts.push(
        `GPUs ${other.gpuIndices.join(',')} were reserved for ${other.shardId}, but the engine of ${wanted.shardId} runs on them: the reservation was dropped`,
      );
    }
    state.allocations = state.allocations.filter((a) => a.shardId !== wanted.shardId && !others.includes(a));
    state.allocations.push({ ...wanted, gpuIndices: [...wanted.gpuIndices], hcas: [...wanted.hcas], since: now, via: 'claim' });
    result.claimed.push(wanted.shardId);
  }
  result.allocations = state.allocations.map((a) => ({ ...a, gpuIndices: [...a.gpuIndices] }));
  return result;
}

export function viewOf(state: NodeState): NodeView {
  return {
    nodeId: state.nodeId,
    phase: state.phase,
    cordoned: state.cordoned,
    reason: state.phase === 'Ready' && !state.cordoned && !state.enrolled ? unenrolledReason(state) : state.reason,
    inventory: state.inventory,
    allocations: state.allocations,
    freeGpus: freeGpus(state),
    ...sharedGpusOf(state),
    lastRegisteredAt: state.lastRegisteredAt,
    notReadySince: state.notReadySince,
    registrations: state.registrations,
    ...(state.weights ? { weights: state.weights } : {}),
    ...(state.weightsProof ? { weightsProof: state.weightsProof } : {}),
    ...(state.lastSignedAt ? { registrationSignedAt: state.lastSignedAt } : {}),
    enrolled: state.enrolled === true,
    ...(state.enrollment ? { agentKey: state.enrollment.publicKey, enrollment: state.enrollment } : {}),
    ...(state.offeredKey ? { offeredKey: state.offeredKey } : {}),
    ...(state.settings?.reconcileDryRun ? { reconcileDryRun: true } : {}),
  };
}

/** What the node's memo lists for placement: each held revision as `repo@commit`, sorted. */
export function heldWeightKeys(state: NodeState): string[] {
  return (state.weights ?? []).map((w) => heldWeightsKey(w.repo, w.commit)).sort();
}

/**
 * Whether a node whose grace ran out is held back from Lost, and why: when most of the
 * registered fleet is silent at once (and more than one node), the cut is far more likely on
 * the control plane's side (Temporal's own network or switch, an overloaded server) than on
 * every host, and declaring them all Lost would re-place everything with nowhere to go and
 * then stop every engine when the cut heals. Kubernetes' node lifecycle controller stops
 * evicting for the same reason. Without a recent view of the fleet, nothing is held.
 */
export function lostHeldBecause(silence: FleetSilence | undefined): string | undefined {
  if (!silence) return undefined;
  const known = silence.heard + silence.silent;
  if (silence.silent < 2 || silence.silent * 2 <= known) return undefined;
  return `${silence.silent} of ${known} nodes are silent at once, more likely a cut on the control plane's side than ${silence.silent} hosts down: not declared Lost while most are silent (cordon the nodes known to be gone to move their replicas)`;
}
