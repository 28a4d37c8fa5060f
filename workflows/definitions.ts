// Signals, Updates and Queries of llmgw's workflows, in one module that the workflows,
// the agent, the CLI and the tests all import.
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { Register } from '../proto/gen/llmgw/v1/register_pb.js';
import type { ShardStatus } from '../proto/gen/llmgw/v1/shard_pb.js';
import type {
  AgentEnrollment,
  AwakeRequest,
  AwakeResult,
  AgentSettings,
  ClaimRequest,
  ClaimResult,
  HeldWeights,
  NodeStatusSignal,
  NodeView,
  ReleaseRequest,
  ReserveRequest,
  RegisterProof,
  ReserveResult,
} from '../common/node-types.js';

// node/<nodeId>
/**
 * The agent's report, its current settings as plain JSON, and (since agent keys) its signature
 * over the report: the node acts on it only once the control worker verified it.
 */
export const registerSignal = defineSignal<[Register, AgentSettings?, RegisterProof?]>('register');
/** The operator enrolls the agent's public key (`llmgw nodes enroll`), signed with the catalog key. */
export const enrollUpdate = defineUpdate<NodeView, [AgentEnrollment]>('enroll');
/** The control worker saw no worker heartbeat from the agent for `seconds` (workers/liveness.ts). */
export const agentSilentSignal = defineSignal<[{ seconds: number }]>('agentSilent');
/** The agent's worker heartbeats came back after an agentSilent. */
export const agentHeardSignal = defineSignal<[Record<string, never>]>('agentHeard');
/** The shards the agent runs, sent when that set changes (agent/host/running-shards-report.ts). */
export const runningShardsSignal = defineSignal<[{ shardIds: string[]; at: string }]>('runningShards');
/** The agent is shutting down on purpose: NotReady now rather than after a heartbeat timeout. */
/** The agent's weights cache changed (a fetch completed, an eviction, a shard started or stopped using one). */
/** `proof`: the agent's signature over `weights` (common/agent-report.ts); placement verifies it, the node only keeps it. */
export const weightsHeldSignal = defineSignal<[{ weights: HeldWeights[]; at: string; proof?: string }]>('weightsHeld');
export const agentStoppingSignal = defineSignal<[{ reason: string }]>('agentStopping');
export const reserveUpdate = defineUpdate<ReserveResult, [ReserveRequest]>('reserve');
export const releaseUpdate = defineUpdate<boolean, [ReleaseRequest]>('release');
export const claimUpdate = defineUpdate<ClaimResult, [ClaimRequest]>('claim');
/** A sharing shard's engine asks to wake, or says it fell asleep (docs/sleep.md, "Sharing GPUs"); MAC'd like release. */
export const awakeUpdate = defineUpdate<AwakeResult, [AwakeRequest]>('awake');
export const cordonUpdate = defineUpdate<NodeView, [{ reason?: string }]>('cordon');
export const uncordonUpdate = defineUpdate<NodeView, []>('uncordon');
/** An operator returns a GPU its agent held out for a fault (`llmgw nodes clear-gpu NODE GPU`). */
export const clearGpuUpdate = defineUpdate<{ cleared: boolean; message: string }, [{ gpuIndex: number }]>('clearGpu');
export const describeNodeQuery = defineQuery<NodeView>('describe');

// replica/<deployment>/<seq>: what agents and node workflows tell a replica.
export const shardTransitionSignal = defineSignal<[ShardStatus]>('shardTransition');
export const nodeStatusSignal = defineSignal<[NodeStatusSignal]>('nodeStatus');
export const capacityChangedSignal = defineSignal<[{ nodeId: string }]>('capacityChanged');

// replica/<deployment>/<seq>: what its deployment asks of it, and what it tells back.
export const stopReplicaSignal = defineSignal<[{ reason: string }]>('stop');
export const replicaStatusQuery = defineQuery<import('../common/replica-types.js').ReplicaView>('status');

// deployment/<name>
export const replicaStatusSignal = defineSignal<[import('../common/replica-types.js').ReplicaView]>('replicaStatus');
export const scaleUpdate = defineUpdate<import('../common/replica-types.js').DeploymentView, [number]>('scale');
/** A replica's engines to sleep and back (issue 38, common/sleep-types.ts); each is in its history with who asked. */
export const sleepReplicaUpdate = defineUpdate<
  import('../common/replica-types.js').ReplicaView,
  [import('../common/sleep-types.js').SleepRequest]
>('sleepReplica');
export const wakeReplicaUpdate = defineUpdate<
  import('../common/sleep-types.js').WakeResult,
  [import('../common/sleep-types.js').WakeRequest]
>('wakeReplica');
export const undeployUpdate = defineUpdate<import('../common/replica-types.js').DeploymentView, []>('undeploy');
/** Roll to another revision (plain JSON `{"profile": "P"}`, or `{}` for the catalog's current one), pause, resume or undo. */
export const rolloutUpdate = defineUpdate<
  import('../common/replica-types.js').DeploymentView,
  [import('../common/replica-types.js').RolloutRequest]
>('rollout');
/** An autoscaler's decision: a new desired count (refused when it changes nothing, so it costs no event). */
export const autoscaleUpdate = defineUpdate<
  import('../common/replica-types.js').DeploymentView,
  [import('../common/replica-types.js').AutoscaleDecision]
>('autoscale');
/** A router holds requests for a deployment at zero replicas: start one (a no-op when it has one). */
export const wakeUpdate = defineUpdate<import('../common/replica-types.js').DeploymentView, [{ reason: string; by?: string }]>('wake');
/** Change the autoscaling bounds (plain JSON settings), or turn it off (null) keeping the current count. */
export const setAutoscaleUpdate = defineUpdate<
  import('../common/replica-types.js').DeploymentView,
  [import('../common/autoscale.js').AutoscaleSettings | null]
>('setAutoscale');
/** The control worker saw the catalog's entry for this deployment's profile change. */
export const catalogChangedSignal = defineSignal<[{ profile: string; revision: string }]>('catalogChanged');
export const deploymentStatusQuery = defineQuery<import('../common/replica-types.js').DeploymentView>('status');

// Reconciliation.
/** The node's allocations made to match what its agent reports (reconcileNode). */
export const reconcileAllocationsUpdate = defineUpdate<
  import('../common/node-types.js').ReconcileAllocationsResult,
  [import('../common/node-types.js').ReconcileAllocationsRequest]
>('reconcileAllocations');
/**
 * A replica workflow closed without its final report (terminated, timed out): the
 * deployment marks it Failed with the reason and replaces it. Sent by reconcileNode,
 * which finds its engine still running and stops it.
 */
export const replicaClosedSignal = defineSignal<[{ replicaId: string; reason: string }]>('replicaClosed');
/** A replica rebuilt by reconciliation joins its deployment (which may be rebuilt too). */
export const adoptReplicaSignal = defineSignal<[{ replicaId: string; seq: number; reason: string }]>('adoptReplica');

// batch_<id> (issue 40): a batch of the Batch API.
/** Stop scheduling, cancel the running chunks, write what is done, end `cancelled`. */
export const cancelBatchSignal = defineSignal<[{ by?: string }]>('cancelBatch');
export const batchStatusQuery = defineQuery<import('../batches/batch-view.js').BatchView>('batchStatus');
