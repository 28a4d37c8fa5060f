// The replica and deployment domain: states, inputs and views, as plain JSON (they
// cross continue-as-new and show in the Web UI). Safe to import from workflows.
import type { SleepPolicy, SleepView } from './sleep-types.js';

/**
 * Every phase of a replica, in lifecycle order, defined once: the type is derived from the list,
 * and route entries' schemas (the routes workflow and the router) accept exactly these.
 */
export const REPLICA_PHASES = [
  'Pending',
  'Placing',
  'Unschedulable',
  'Fetching',
  'Starting',
  'Loading',
  'Ready',
  'Sleeping',
  'Unknown',
  'Draining',
  'Stopped',
  'Failed',
] as const;
export type ReplicaPhase = (typeof REPLICA_PHASES)[number];

export const ROUTABLE_PHASES: readonly ReplicaPhase[] = ['Ready', 'Unknown'];
/**
 * The steps of coming up, which a deployment treats as one (the replica decides nothing yet):
 * a replica reports to its deployment only on leaving them, so the deployment's view of such a
 * replica may name an earlier step than the replica's own.
 */
export const COMING_UP_PHASES: readonly ReplicaPhase[] = ['Pending', 'Placing', 'Fetching', 'Starting', 'Loading'];

/**
 * A variable's value in a profile: a literal, or a reference to a variable of the agent's own
 * host (`--pass-env`, `--env-file`), resolved only at spawn: a secret's value never leaves it.
 */
export type EnvValue = string | { fromHost: string };

/** What a replica runs: the catalog profile, copied at deploy time (plain JSON). */
export interface ProfileSnapshot {
  model: string;
  modelSource: string;
  servedName: string;
  profile: string;
  engine: 'vllm' | 'sglang' | 'fake' | 'llamacpp';
  launcher: 'native' | 'ray';
  gpuClass: string;
  tensorParallel: number;
  pipelineParallel: number;
  gpusPerNode: number;
  nodes: number;
  args: string[];
  env: Record<string, EnvValue>;
  startupTimeoutSeconds: number;
  minGpuMemoryMib: number;
  /** The revision's short digest (common/revision.ts); snapshots taken before revisions lack it. */
  revision?: string;
  /**
   * The control worker's signature of this revision (common/revision-signature.ts), made when
   * it resolved it from the catalog; agents start only revisions whose signature verifies.
   * Absent or '' when unsigned (a control worker without a catalog key, older histories).
   */
  signature?: string;
  /**
   * The catalog's source as written, when pinning changed it (hf://ORG/NAME at a branch, or
   * none): a later resolve keeps the pinned commit while the catalog still says this. Not part
   * of the revision: it does not change what engines run.
   */
  sourceAsWritten?: string;
  /** The profile's sleep policy (common/sleep-types.ts); absent: its replicas never sleep. */
  sleep?: SleepPolicy;
}

export interface ShardPlacement {
  rank: number;
  nodeId: string;
  shardId: string;
  gpuIndices: number[];
  hcas: string[];
  managementAddress: string;
  httpPort: number;
  pid: number;
  /** This rank as the replica last saw it: Starting, Ready (up, and for rank 0 serving). */
  state?: string;
  /** The control worker's placement ticket (common/placement-ticket.ts); the agent starts nothing without it. */
  ticket?: string;
  /**
   * Rank 0: its agent's signed word on the endpoint (common/endpoint-attestation.ts), from the
   * last waitHealthy; routes are signed only for the endpoint it names.
   */
  attestation?: string;
}

export interface ReplicaInput {
  deployment: string;
  seq: number;
  profile: ProfileSnapshot;
  /** The deployModel workflow to tell about every phase change. */
  deploymentWorkflowId: string;
  drainGraceSeconds?: number;
  /** A drain waits for the engine's in-flight requests this long at most. */
  drainTimeoutSeconds?: number;
  labels?: Record<string, string>;
  /** Adopt shards that are already running (reconciliation) instead of placing new ones. */
  adopt?: ShardPlacement[];
  /** State handed over by continue-as-new (honoured only when its seal verifies: workflows/carried.ts). */
  carried?: unknown;
  /** The control worker's MAC over the rest of a continued run's input (workflows/carried.ts). */
  seal?: string;
  /** Set by the hand-over to a new llmgw build: the run parks until `llmgw upgrade` moves it. */
  upgrading?: boolean;
  /** Tests: hand over after this many history events instead of the default bound. */
  continueAsNewAfterEvents?: number;
  /** Tests: how long an Unschedulable replica waits for a capacity signal before it looks again. */
  capacityRecheckSeconds?: number;
}

/** What an Unschedulable replica waits for (its `demand` memo), read by whoever frees GPUs. */
export interface DemandMemo {
  gpuClass: string;
  gpusPerNode: number;
  nodes: number;
  since: string;
  /** A profile able to sleep: the share of each GPU it takes awake (it may go where only sleepers are). */
  awakeShare?: number;
}

export interface ReplicaView {
  replicaId: string;
  seq: number;
  phase: ReplicaPhase;
  reason: string;
  nodes: string[];
  gpus: string[];
  endpoint: string;
  shards: ShardPlacement[];
  placements: number;
  restarts: number;
  since: string;
  /** The revision this replica runs. */
  revision?: string;
  /** Asleep since when and at which level, and its last wake (a profile with a sleep policy). */
  sleep?: SleepView;
}

/** The `route` memo the router reads from visibility. */
export interface RouteMemo {
  deployment: string;
  servedName: string;
  endpoint: string;
  phase: ReplicaPhase;
  replicaId: string;
}

export interface DeployModelInput {
  model: string;
  name?: string;
  profile?: string;
  /** Default 1 (or the autoscaling minimum, at least 1). */
  replicas?: number;
  /** Follow load between min and max (common/autoscale.ts); over the catalog's. */
  autoscale?: import('./autoscale.js').AutoscaleSettings;
  gpuClass?: string;
  labels?: Record<string, string>;
  /** Set when reconciliation rebuilds a deployment Temporal lost: desired = what was found. */
  rebuilt?: { reason: string };
  /** auto: a catalog edit to its profile starts a rollout; manual (default): only `llmgw rollout`. */
  rollout?: 'auto' | 'manual';
  maxSurge?: number;
  maxUnavailable?: number;
  /** State handed over by continue-as-new (honoured only when its seal verifies: workflows/carried.ts). */
  carried?: unknown;
  /** The control worker's MAC over the rest of a continued run's input (workflows/carried.ts). */
  seal?: string;
  /** Set by the hand-over to a new llmgw build (workflows/upgrade.ts). */
  upgrading?: boolean;
  /** Tests: hand over after this many history events instead of the default bound. */
  continueAsNewAfterEvents?: number;
}

/** `Sleeping`: every replica it wants is up and none is awake (docs/sleep.md). */
export type DeploymentPhase =
  'Validating' | 'Progressing' | 'Ready' | 'Sleeping' | 'Idle' | 'RollingOut' | 'Degraded' | 'Undeploying' | 'Undeployed' | 'Failed';

/** What an autoscaler sends when the load asks for another count (the `autoscale` Update). */
export interface AutoscaleDecision {
  desired: number;
  /** Why, in words: the signal values and the rule that fired. */
  reason: string;
  /** The signal values it decided on (requests in flight, waiting, KV-cache use, queued at routers). */
  signals?: Record<string, number>;
  /** Who decided (a router id). */
  by?: string;
}

/** Autoscaling as `llmgw status` and the Web UI show it. */
export interface AutoscaleView {
  min: number;
  max: number;
  metric: string;
  target: number;
  idleToZeroSeconds?: number;
  /** The rest of the policy (absent from a deployment of a release before 0.3.0: the defaults). */
  upAfterSeconds?: number;
  downAfterSeconds?: number;
  tolerance?: number;
  lastDecision?: AutoscaleDecision & { at: string; from: number };
}

/** A rollout as `llmgw status`, `llmgw rollout --wait` and the Web UI show it. */
export interface RolloutView {
  from: string;
  to: string;
  fromProfile: string;
  toProfile: string;
  /** surge: a new replica first, then an old one drained; drain-first: no room, one old replica at a time. */
  mode: 'surge' | 'drain-first';
  state: 'RollingOut' | 'Paused' | 'RollingBack' | 'Complete' | 'RolledBack' | 'Failed';
  /** Replicas on the target revision that are Ready and routed, of the desired count. */
  done: number;
  desired: number;
  maxSurge: number;
  maxUnavailable: number;
  reason: string;
  startedAt: string;
  finishedAt?: string;
  /** What happened, oldest first (the last few steps). */
  steps: string[];
}

/** The Workflow Update `rollout` on deployment/<name>, as plain JSON (Temporal CLI, Web UI). */
export interface RolloutRequest {
  /** The profile to roll to; leave out for the catalog's current revision of the profile it runs. */
  profile?: string;
  maxSurge?: number;
  maxUnavailable?: number;
  /** Roll back to the revision before (during a rollout: abandon it). */
  undo?: boolean;
  pause?: boolean;
  resume?: boolean;
  /** Move the source to what its ref (a branch, or the default one) points at now; otherwise the pinned commit is kept. */
  refreshSource?: boolean;
  /** false: do not fetch the new revision onto hosts before draining (its replicas fetch as they start). */
  prefetch?: boolean;
}

export interface DeploymentView {
  name: string;
  model: string;
  profile: string;
  servedName: string;
  phase: DeploymentPhase;
  desired: number;
  ready: number;
  replicas: ReplicaView[];
  reason: string;
  /** Why it was rebuilt, when reconciliation rebuilt it from running engines. */
  rebuilt?: string;
  /** The revision it runs (or rolls out to). */
  revision?: string;
  /** The model source of that revision, pinned (hf://ORG/NAME@<commit>). */
  modelSource?: string;
  autoscale?: AutoscaleView;
  /** The catalog's current revision of its profile, when it differs. */
  catalogRevision?: string;
  rollout?: RolloutView;
  /** Its profile's sleep policy, when it has one: what routers put idle replicas to sleep by. */
  sleep?: SleepPolicy;
  /**
   * The revisions it runs now, signed: its own, and both sides of a rollout in progress. The
   * control worker signs tickets and routes only for these (activities/revision-liveness.ts).
   */
  revisions?: LiveRevision[];
}

/** One revision a deployment runs now: its catalog profile, digest and the control worker's signature. */
export interface LiveRevision {
  profile: string;
  revision: string;
  signature: string;
}
