// Reconciliation's domain: what the control plane knows about the shards an agent
// reports, the actions that make the two agree, and the result an operator reads.
// Plain JSON; safe to import from workflows.
import type { Allocation, NodeView } from './node-types.js';
import type { ProfileSnapshot, ReplicaView, ShardPlacement } from './replica-types.js';

export interface ReconcileNodeInput {
  nodeId: string;
  /** Why this run: 'registration', 'schedule', 'cli', … (shown in the UI). */
  trigger?: string;
  /** Plan and show, change nothing (the agent's --reconcile dry-run). */
  dryRun?: boolean;
  /**
   * A report to reconcile instead of asking the agent for a fresh one. Used to check that
   * reconciling the same report twice acts only once.
   */
  report?: import('../proto/gen/llmgw/v1/register_pb.js').Register;
}

export type WorkflowPresence = 'running' | 'closed' | 'missing';

/**
 * How `llmgw upgrade` begins the reason of a run it ends so that reconciliation rebuilds it
 * (cli/actions/upgrade-pre-release.ts): such a replica counts as missing, not closed, and its
 * engines are adopted rather than stopped.
 */
export const ENDED_TO_BE_ADOPTED = 'llmgw upgrade: ended to move to a new build';

/** What Temporal and the catalog say about one replica a report or an allocation names. */
export interface ReplicaFacts {
  replica: WorkflowPresence;
  /** The running replica's own view (its shards); absent unless running and answering. */
  view?: ReplicaView;
  deployment: WorkflowPresence;
  /**
   * Why the revision it runs is no longer live (revoked in the catalog, its model or profile
   * gone, its key gone, or no longer run by its deployment): its engines are stopped and the
   * replica ends saying so. Absent when live, or when it cannot be told (no ticket yet).
   */
  revoked?: string;
}

export interface ReconcileFacts {
  node: NodeView | undefined;
  replicas: Record<string, ReplicaFacts>;
  /** `${model}/${profile}` → still in the catalog. */
  catalog: Record<string, boolean>;
  drainGraceSeconds: number;
  /** When these facts were gathered (ISO); allocations younger than the grace are left alone. */
  checkedAt: string;
  /** Why the report is not the agent's own word (activities/report-check.ts): the run acts on nothing. */
  reportRefused?: string;
}

export type ReconcileAction =
  | { kind: 'adopt'; replicaId: string; shardId: string; gpuIndices: number[]; reason: string }
  | {
      kind: 'rebuild';
      replicaId: string;
      deployment: string;
      seq: number;
      snapshot: ProfileSnapshot;
      shards: ShardPlacement[];
      rebuildDeployment: boolean;
      pool: string;
      reason: string;
    }
  | {
      kind: 'stop';
      replicaId: string;
      shardId: string;
      gpuIndices: number[];
      pid: number;
      stopReplica: boolean;
      reason: string;
      /** The deployment workflow to tell that this replica ended without telling it (terminated, timed out). */
      tellDeployment?: string;
    }
  | { kind: 'release'; replicaId: string; shardId: string; gpuIndices: number[]; reason: string }
  | { kind: 'kill'; pid: number; gpuIndices: number[]; command: string; reason: string };

export interface ReconcilePlan {
  actions: ReconcileAction[];
  /** Allocations the node must hold after this run (reported, kept shards). */
  claims: Allocation[];
  /** Shards whose allocation goes (stopped or held by nothing). */
  releases: string[];
  /** Shards found as they should be: no action. */
  unchanged: string[];
}

export type ActionOutcome = ReconcileAction & {
  /** False when executing it found nothing to change (already stopped, already held, …). */
  effective: boolean;
  outcome: string;
};

export interface ReconcileResult {
  nodeId: string;
  trigger: string;
  reportedAt: string;
  /** Every action the plan named, with what executing it did. */
  actions: ActionOutcome[];
  /** Effective actions; 0 means the node and the control plane already agreed. */
  changed: number;
  unchanged: string[];
  allocationsBefore: Allocation[];
  allocationsAfter: Allocation[];
  skipped?: string;
  dryRun?: boolean;
}
