// The node workflow's domain: one host's inventory, health and GPU allocations, as
// plain JSON (no Map/Set/class) so that it crosses continue-as-new and shows in the UI.
// Safe to import from workflows.

export type NodePhase = 'Registering' | 'Ready' | 'NotReady' | 'Lost';

/**
 * NotReady for this long → Lost (`--lost-grace-seconds`). With the liveness sweep's 10 s of
 * silence before NotReady, a host that drops off the network has its replicas re-placed
 * about 30 s after its last heartbeat; why 20 s: docs/failures.md ("A host cut off").
 */
export const DEFAULT_LOST_GRACE_SECONDS = 20;

export interface GpuInfo {
  index: number;
  uuid: string;
  name: string;
  memoryTotalMib: number;
  memoryUsedMib: number;
  numaNode: number;
  /** Indices of the GPUs this one reaches over NVLink. */
  nvlinkPeers: number[];
  /** HCAs on the same PCIe switch (PIX/PXB). */
  nearHcas: string[];
  /** Why this GPU must not be allocated; empty when healthy. */
  problems: string[];
}

export interface FabricInfo {
  fabric: string;
  hcas: string[];
  rateGbps: number;
}

/** A compute process on one of the node's GPUs that its agent did not start (see Register). */
export interface ForeignProcessInfo {
  pid: number;
  gpuIndices: number[];
  command: string;
  usedMemoryMib: number;
  killed: boolean;
  note: string;
}

export interface NodeInventory {
  nodeId: string;
  hostname: string;
  managementAddress: string;
  adminAddress: string;
  labels: Record<string, string>;
  gpuClass: string;
  gpus: GpuInfo[];
  /** GPU indices this agent may hand out. */
  managedGpus: number[];
  fabrics: FabricInfo[];
  problems: string[];
  /** Compute processes on managed GPUs that the agent did not start; absent in older registrations. */
  foreignProcesses?: ForeignProcessInfo[];
  agentVersion: string;
  gpuSource: string;
  reportedAt: string;
}

export interface Allocation {
  shardId: string;
  replicaId: string;
  gpuIndices: number[];
  hcas: string[];
  since: string;
  /** 'reserve' (placement) or 'claim' (adoption of a running engine). */
  via: 'reserve' | 'claim' | 'report';
  /**
   * Set for an engine able to sleep, which shares its GPUs with other sleepers: the share of each
   * GPU it takes awake (0 < x ≤ 1). Absent: it holds its GPUs alone (docs/sleep.md, "Sharing GPUs").
   */
  awakeShare?: number;
  /** A sharing engine asleep: its share is free for another to wake into. */
  asleep?: boolean;
  /** When it last became awake (reserved, restored or granted a permit): the least recent is asked to sleep first. */
  awakeSince?: string;
}

/**
 * The agent's settings that the node workflow acts on. They travel with every registration,
 * so an agent restarted with other flags changes them (and the reconcile Schedule) at once.
 */
export interface AgentSettings {
  /** A dead agent shows as NotReady within this (plus Temporal's timer slack). */
  presenceHeartbeatSeconds: number;
  /** NotReady for longer than this → Lost: replicas are told and the GPUs released. */
  lostGraceSeconds: number;
  /** The node's reconcile Schedule runs this often (0: no Schedule; reconcile on registration only). */
  reconcileEverySeconds: number;
  /** Reconciliation only shows what it would do. */
  reconcileDryRun: boolean;
  /**
   * Which run of the agent process registered (a random id per start; agents since 0.3.0): a
   * presence that times out after another process registered is not a dead agent
   * (workflows/node/presence.ts).
   */
  agentInstance?: string;
}

export interface ReserveRequest {
  shardId: string;
  replicaId: string;
  count: number;
  gpuClass?: string;
  minFreeMemoryMib?: number;
  /**
   * For an engine able to sleep (a profile with a sleep policy): the share of each GPU it takes
   * awake. It may then be placed on GPUs whose every holder shares too, where that share fits.
   */
  awakeShare?: number;
  /**
   * Runs of the release before Worker Versioning: a workflow to signal when this node frees
   * GPUs after a rejection. Ignored now; waiting replicas are woken through visibility.
   */
  wakeWorkflowId?: string;
  /**
   * Placement of a control worker that trusts unenrolled agents (`--trust-unenrolled-agents`, or
   * one without a catalog key): a node no enrolled key vouches for may still take the shard.
   */
  allowUnenrolled?: boolean;
}

export type ReserveResult =
  | { ok: true; nodeId: string; gpuIndices: number[]; hcas: string[]; managementAddress: string }
  | { ok: false; nodeId: string; reason: string };

/**
 * The control worker's MAC on a request that frees or takes GPUs (common/node-request-mac.ts):
 * `v1.<key id>.<expires at, ms>.<mac>`. Absent only from a control worker with no catalog key.
 */
export interface NodeRequestProof {
  proof?: string;
}

/** The proof's shape, which an Update validator checks (the MAC itself is checked in the handler). */
export const NODE_REQUEST_PROOF_FORM = /^v1\.[A-Za-z0-9_:-]{1,128}\.\d{1,15}\.[A-Za-z0-9_-]{43}$/;

export interface ReleaseRequest extends NodeRequestProof {
  shardId: string;
}

export interface ClaimRequest extends NodeRequestProof {
  shardId: string;
  replicaId: string;
  gpuIndices: number[];
}

export type ClaimResult = { ok: true } | { ok: false; reason: string };

/**
 * A sharing shard's engine about to wake (`awake: true`) or just fallen asleep (`awake: false`):
 * the node grants a wake only if its share fits on every GPU it holds (docs/sleep.md).
 */
export interface AwakeRequest extends NodeRequestProof {
  shardId: string;
  awake: boolean;
}

/** An awake replica holding GPUs that a wake needs: asked to sleep, least recently woken first. */
export interface AwakeHolder {
  replicaId: string;
  shardIds: string[];
  awakeSince: string;
}

export type AwakeResult = { ok: true } | { ok: false; reason: string; holders: AwakeHolder[] };

/**
 * One revision of model weights a host's cache holds complete, as its agent reports it
 * (agent/weights/weights-report.ts). What placement prefers and `llmgw weights ls` shows.
 */
export interface HeldWeights {
  /** The pinned source: hf://ORG/NAME@<commit>. */
  source: string;
  repo: string;
  commit: string;
  bytes: number;
  /** When a replica last asked for it (ISO). */
  lastUsedAt: string;
  /** The shards on the host whose engines run it now: never evicted, `llmgw weights rm` refuses. */
  inUseBy: string[];
}

/** The memo key of the node workflow listing what its host holds, as `repo@commit` (placement reads it). */
export const HELD_WEIGHTS_MEMO = 'weights';

/**
 * The memo key of the node workflow listing the awake load of each GPU only sleepers' engines
 * hold (common/placement/shared-gpus.ts): placement's index reads it for sharing requests.
 */
export const SHARED_GPUS_MEMO = 'sharedGpus';

/** The key placement matches a pinned source against a host's holdings by. */
export function heldWeightsKey(repo: string, commit: string): string {
  return `${repo}@${commit}`;
}

export interface NodeView {
  nodeId: string;
  phase: NodePhase;
  cordoned: boolean;
  reason: string;
  inventory: NodeInventory | undefined;
  allocations: Allocation[];
  freeGpus: number[];
  /** The awake load of each GPU held only by sharing engines (docs/sleep.md); absent when none. */
  sharedGpus?: number[];
  lastRegisteredAt: string | undefined;
  notReadySince: string | undefined;
  registrations: number;
  /** The weights its host's cache holds, as last reported; absent until the agent reports them. */
  weights?: HeldWeights[];
  /** The agent's signature over `weights` (common/agent-report.ts): placement trusts the list only where it verifies. */
  weightsProof?: string;
  /** When the registration the node acted on last was signed: a weights report signed before it is an old one. */
  registrationSignedAt?: string;
  /** The agent public key the operator enrolled (`ed25519-public:…`); absent: unenrolled. */
  agentKey?: string;
  /** That enrollment as the operator signed it: the route signer verifies it before it trusts the key. */
  enrollment?: AgentEnrollment;
  /** The inventory came from a registration signed by the enrolled key: placement may use the node. */
  enrolled?: boolean;
  /** The key the latest registration that was not verified was signed with (what to enroll). */
  offeredKey?: string;
  /** The agent runs `--reconcile dry-run`: a reconciliation of this node only shows what it would do. */
  reconcileDryRun?: boolean;
}

/**
 * What a node shows as its state (LlmgwState, placement's index): Cordoned over its phase, and a
 * Ready node that no enrolled agent key vouches for as Unenrolled, which placement skips.
 */
export function shownNodeState(view: Pick<NodeView, 'phase' | 'cordoned' | 'enrolled'>): string {
  if (view.cordoned) return 'Cordoned';
  return view.phase === 'Ready' && !view.enrolled ? 'Unenrolled' : view.phase;
}

/**
 * The operator's word that node `nodeId`'s agent holds `publicKey`: signed with the catalog key
 * (`llmgw nodes enroll`), so nobody who can only write to the namespace can enroll a key.
 */
export interface AgentEnrollment {
  nodeId: string;
  publicKey: string;
  /** RFC 3339; a later enrollment replaces an earlier one, never the reverse. */
  enrolledAt: string;
  signature: string;
}

/**
 * What an agent sends beside its registration: its public key, when it signed, and its
 * signature over the node id, that time and the whole report (address included). An agent
 * given the catalog key to enroll itself (`llmgw up`, tests) adds the enrollment.
 */
export interface RegisterProof {
  publicKey: string;
  signedAt: string;
  signature: string;
  enrollment?: AgentEnrollment;
}

/** What the node workflow tells a replica about the host under it. */
export interface NodeStatusSignal {
  nodeId: string;
  phase: NodePhase;
  reason: string;
  /** When the node entered this phase (its workflow's clock): a later signal may overtake an earlier one. */
  at?: string;
}

export interface ReconcileAllocationsRequest extends NodeRequestProof {
  /** Allocations of engines the agent reports running: the node must hold exactly these GPUs for them. */
  claims: Allocation[];
  /** Shards whose allocation goes. */
  releases: string[];
}

export interface ReconcileAllocationsResult {
  claimed: string[];
  released: string[];
  /** Claims that could not be honoured, each with why. */
  conflicts: string[];
  /** The node's allocations afterwards. */
  allocations: Allocation[];
}
