// Reconciliation's control activity inspectNode, and the presence check rebuildReplica shares:
// what Temporal and the catalog know about the replicas an agent's report names, and which of
// them run a revision that is no longer live (revoked-replicas.ts).
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { CatalogSource } from '../catalog/watch.js';
import { revokedReplicas } from './revoked-replicas.js';
import { deploymentWorkflowId, nodeWorkflowId, parseReplicaWorkflowId } from '../common/names.js';
import { FailureType } from '../common/failures.js';
import type { NodeView } from '../common/node-types.js';
import type { ReplicaView } from '../common/replica-types.js';
import { ENDED_TO_BE_ADOPTED, type ReconcileFacts, type ReplicaFacts, type WorkflowPresence } from '../common/reconcile-types.js';
import { describeNodeQuery, replicaStatusQuery } from '../workflows/definitions.js';
import { create } from '@bufbuild/protobuf';
import { RegisterSchema, type Register } from '../proto/gen/llmgw/v1/register_pb.js';
import { shardReportRefusal, type ReportTrust } from './report-check.js';

export interface InspectRequest {
  nodeId: string;
  /** Every replica id a reported shard or an allocation names. */
  replicaIds: string[];
  /** `${model}/${profile}` pairs the reported shards run. */
  profiles: { model: string; profile: string }[];
  /**
   * The report the run is about to act on (absent from runs before signed reports), as plain
   * JSON: one handed to reconcileNode may predate fields, which a protobuf payload cannot carry.
   */
  report?: unknown;
}

/** The Register `value` was, its missing fields at their defaults; undefined when it is none. */
function registerOf(value: unknown): Register | undefined {
  try {
    const plain = JSON.parse(JSON.stringify(value), (key, v: unknown) => (key === '$typeName' ? undefined : v)) as object;
    return create(RegisterSchema, plain);
  } catch {
    return undefined;
  }
}

/** Whether a workflow runs, has closed, or is missing: a run ended to move it to a new build counts as missing. */
export async function workflowPresence(client: Client, workflowId: string): Promise<WorkflowPresence> {
  try {
    const description = await client.workflow.getHandle(workflowId).describe();
    if (description.status.name === 'RUNNING') return 'running';
    // A run ended to move it to a new build, or one that refused the state it was handed, counts
    // as lost: its engines are adopted, not stopped.
    const ended = description.status.name === 'TERMINATED' || description.status.name === 'FAILED';
    if (ended && (await endedToBeAdopted(client, workflowId, description.runId))) return 'missing';
    return 'closed';
  } catch (error) {
    if (error instanceof WorkflowNotFoundError) return 'missing';
    throw error;
  }
}

/**
 * Whether this run ended for reconciliation to rebuild: `llmgw upgrade` ended it (its reason says
 * so), or it refused its carried state (workflows/carried.ts) and so knows nothing of its engines.
 */
async function endedToBeAdopted(client: Client, workflowId: string, runId: string): Promise<boolean> {
  const response = await client.workflowService.getWorkflowExecutionHistoryReverse({
    namespace: client.options.namespace,
    execution: { workflowId, runId },
    maximumPageSize: 1,
  });
  const last = response.history?.events?.[0];
  if (last?.workflowExecutionFailedEventAttributes)
    return last.workflowExecutionFailedEventAttributes.failure?.applicationFailureInfo?.type === FailureType.CarriedStateRefused;
  return (last?.workflowExecutionTerminatedEventAttributes?.reason ?? '').startsWith(ENDED_TO_BE_ADOPTED);
}

/**
 * What Temporal and the catalog say about the replicas a node's report names; when the report is
 * not the agent's own word (report-check.ts) the facts say so and the run acts on nothing.
 */
export async function inspectNode(
  catalog: CatalogSource,
  client: Client,
  request: InspectRequest,
  trust?: ReportTrust,
): Promise<ReconcileFacts> {
  const node = await client.workflow
    .getHandle(nodeWorkflowId(request.nodeId))
    .query(describeNodeQuery)
    .catch((error: unknown): NodeView | undefined => {
      if (error instanceof WorkflowNotFoundError) return undefined;
      throw error;
    });
  const report = request.report === undefined ? undefined : registerOf(request.report);
  const refused =
    request.report === undefined || !trust
      ? undefined
      : report
        ? shardReportRefusal(request.nodeId, node, report, trust)
        : 'the report is not a Register';
  if (refused) {
    trust!.log(`not reconciling node ${request.nodeId} on this report: ${refused}`);
    return { node, replicas: {}, catalog: {}, drainGraceSeconds: 0, checkedAt: new Date().toISOString(), reportRefused: refused };
  }
  const replicaIds = new Set([...request.replicaIds, ...(node?.allocations ?? []).map((a) => a.replicaId)]);
  const replicas: Record<string, ReplicaFacts> = {};
  // Replicas of one deployment share its answer: ask once per deployment.
  const deployments = new Map<string, Promise<WorkflowPresence>>();
  for (const replicaId of replicaIds) {
    const replica = await workflowPresence(client, replicaId);
    const deploymentName = parseReplicaWorkflowId(replicaId)?.deployment;
    if (deploymentName && !deployments.has(deploymentName))
      deployments.set(deploymentName, workflowPresence(client, deploymentWorkflowId(deploymentName)));
    const deployment = deploymentName ? await deployments.get(deploymentName)! : 'missing';
    let view: ReplicaView | undefined;
    if (replica === 'running') {
      // A replica whose worker is down cannot answer; the plan then leaves its shards alone.
      view = await client.workflow
        .getHandle(replicaId)
        .query(replicaStatusQuery)
        .catch(() => undefined);
    }
    replicas[replicaId] = { replica, deployment, ...(view ? { view } : {}) };
  }
  const current = catalog.get();
  if (trust?.catalogKeyFile !== undefined) {
    for (const [replicaId, why] of Object.entries(await revokedReplicas(client, replicas, current, trust.catalogKeyFile)))
      replicas[replicaId] = { ...replicas[replicaId]!, revoked: why };
  }
  const inCatalog: Record<string, boolean> = {};
  for (const { model, profile } of request.profiles) {
    inCatalog[`${model}/${profile}`] = Boolean(current.models.find((m) => m.name === model)?.profiles.some((p) => p.name === profile));
  }
  return {
    node,
    replicas,
    catalog: inCatalog,
    drainGraceSeconds: current.defaults?.drainGraceSeconds ?? 5,
    checkedAt: new Date().toISOString(),
  };
}
