// The replica and deployment domain: states, inputs and views, as plain JSON (they
// cross continue-as-new and show in the Web UI). Safe to import from workflows.

export type ReplicaPhase =
  'Pending' | 'Placing' | 'Unschedulable' | 'Starting' | 'Loading' | 'Ready' | 'Unknown' | 'Draining' | 'Stopped' | 'Failed';

export const ROUTABLE_PHASES: ReplicaPhase[] = ['Ready', 'Unknown'];

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
  engine: 'vllm' | 'sglang' | 'fake';
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
  /**
   * The control worker's signature of this revision (common/revision-signature.ts), made when
   * it resolved it from the catalog; agents start only revisions whose signature verifies.
   * Absent or '' when unsigned (a control worker without a catalog key, older histories).
   */
  signature?: string;
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
}

export interface ReplicaInput {
  deployment: string;
  seq: number;
  profile: ProfileSnapshot;
  /** The deployModel workflow to tell about every phase change. */
  deploymentWorkflowId: string;
  drainGraceSeconds?: number;
  labels?: Record<string, string>;
  /** Adopt shards that are already running (reconciliation) instead of placing new ones. */
  adopt?: ShardPlacement[];
  carried?: unknown;
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
  replicas: number;
  gpuClass?: string;
  labels?: Record<string, string>;
  /** Set when reconciliation rebuilds a deployment Temporal lost: desired = what was found. */
  rebuilt?: { reason: string };
  carried?: unknown;
}

export type DeploymentPhase = 'Validating' | 'Progressing' | 'Ready' | 'Degraded' | 'Undeploying' | 'Undeployed' | 'Failed';

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
}
