// The names every part of llmgw relies on (docs/architecture.md, "Names everybody can rely on"):
// task queues, workflow ids, search attributes, ports. Safe to import from workflows.

export const CONTROL_TASK_QUEUE = 'llmgw';

export function agentTaskQueue(nodeId: string): string {
  return `agent/${nodeId}`;
}

export const WorkflowType = {
  deployModel: 'deployModel',
  replica: 'replica',
  node: 'node',
  reconcileNode: 'reconcileNode',
  /** One per batch of the Batch API, its workflow id the batch's id (workflows/batch/). */
  batch: 'batch',
} as const;

export function deploymentWorkflowId(name: string): string {
  return `deployment/${name}`;
}

export function replicaWorkflowId(deployment: string, seq: number): string {
  return `replica/${deployment}/${seq}`;
}

export function nodeWorkflowId(nodeId: string): string {
  return `node/${nodeId}`;
}

/** The Schedule that reconciles one node, hourly by default (reconcile/<nodeId>; agent --reconcile-every-seconds). */
export function reconcileScheduleId(nodeId: string): string {
  return `reconcile/${nodeId}`;
}

/** Parses `replica/<deployment>/<seq>`; undefined for anything else. */
export function parseReplicaWorkflowId(id: string): { deployment: string; seq: number } | undefined {
  const match = /^replica\/(.+)\/(\d+)$/.exec(id);
  if (!match || match[1] === undefined || match[2] === undefined) return undefined;
  return { deployment: match[1], seq: Number(match[2]) };
}

/** The six search attributes, with the types the dev server and clusters register. */
export const SEARCH_ATTRIBUTES = {
  LlmgwDeployment: 'Keyword',
  LlmgwModel: 'Keyword',
  LlmgwState: 'Keyword',
  LlmgwNodes: 'KeywordList',
  LlmgwGpuClass: 'Keyword',
  LlmgwFreeGpus: 'Int',
} as const;

export type SearchAttributeName = keyof typeof SEARCH_ATTRIBUTES;

/** Environment markers on every engine process the agent starts. */
export const ENGINE_MARKER_ENV = {
  nodeId: 'LLMGW_NODE_ID',
  shardId: 'LLMGW_SHARD_ID',
  replicaId: 'LLMGW_REPLICA_ID',
} as const;

/**
 * The adapter sources an engine may load at run time, as a JSON array: set in the signed
 * revision's env by the catalog (catalog/adapters.ts), honoured by the engine's loader
 * (fake-engine/lora.ts). docs/adapters.md says why it lives in the revision.
 */
export const LORA_SOURCES_ENV = 'LLMGW_LORA_SOURCES';

export const DEFAULT_PORTS = {
  temporal: 7233,
  webUi: 8233,
  router: 8080,
  agentAdmin: 7401,
  /** Prometheus /metrics of the control worker, and of an agent (`llmgw up`'s second agent: 9466). */
  workerMetrics: 9464,
  agentMetrics: 9465,
  enginesFrom: 18000,
  /** Ray's worker processes: from here up to the engine range (Ray's own default overlaps it). */
  rayWorkersFrom: 10002,
} as const;

/** `unix`: the agent's admin API listens on `<state dir>/admin.sock` (agent/admin/auth.ts). */
export const DEFAULT_AGENT_ADMIN_ADDR = 'unix';
export const DEFAULT_AGENT_METRICS_ADDR = `127.0.0.1:${DEFAULT_PORTS.agentMetrics}`;
export const DEFAULT_WORKER_METRICS_ADDR = `127.0.0.1:${DEFAULT_PORTS.workerMetrics}`;

/**
 * A shard id names one start of one rank of one replica. It is also the file name of
 * the shard's spec and log in the agent's state dir, so it has no slashes:
 * `replica/demo/3`, rank 0, attempt 2 → `demo.3.r0.a2`.
 */
export function shardId(replicaId: string, rank: number, attempt: number): string {
  const parsed = parseReplicaWorkflowId(replicaId);
  const base = parsed ? `${parsed.deployment}.${parsed.seq}` : replicaId.replace(/[^A-Za-z0-9._-]/g, '_');
  return `${base}.r${rank}.a${attempt}`;
}

/** True when a shard id is safe to use as a file name in the state dir. */
export function isSafeShardId(id: string): boolean {
  return /^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$/.test(id);
}

/**
 * A simulated host's GPU memory ledger (common/sim-gpu-ledger.ts): the agent of a simulated
 * inventory hands its folder to the fake engines it starts, so the awake engines of one
 * simulated GPU see each other and a wake that would not fit fails as CUDA's out-of-memory does.
 */
export const SIM_GPU_LEDGER_ENV = 'LLMGW_SIM_GPU_LEDGER';
