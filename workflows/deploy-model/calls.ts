// What a deployment calls: the catalog and visibility through control activities, and each
// replica as a child workflow. Workflow side.
import { ParentClosePolicy, startChild, workflowInfo, type ChildWorkflowHandle } from '@temporalio/workflow';
import type { ControlActivities } from '../../activities/index.js';
import { CONTROL_TASK_QUEUE, replicaWorkflowId } from '../../common/names.js';
import { FailureType } from '../../common/failures.js';
import type { ReplicaInput } from '../../common/replica-types.js';
import { revisionOfSnapshot } from '../../common/revision.js';
import type { replica } from '../replica/workflow.js';
import type { DeploymentState } from './state.js';
import { controlActivities } from '../toolkit.js';

export const catalog = controlActivities('profileInCatalog: is the profile still in the catalog before starting a replica');

export function control(summary: string): ControlActivities {
  return controlActivities(summary, {
    retry: {
      maximumAttempts: 5,
      nonRetryableErrorTypes: [FailureType.UnknownModel, FailureType.UnknownProfile, FailureType.UnknownGpuClass, FailureType.InvalidInput],
    },
  });
}

/** Starts the next replica (a sequence number never used before for this name). */
export async function startReplica(
  d: DeploymentState,
  continueAsNewAfterEvents?: number,
): Promise<{ replicaId: string; handle: ChildWorkflowHandle<typeof replica> }> {
  const seq = d.nextSeq++;
  const replicaId = replicaWorkflowId(d.name, seq);
  const input: ReplicaInput = {
    deployment: d.name,
    seq,
    profile: d.snapshot,
    deploymentWorkflowId: workflowInfo().workflowId,
    drainGraceSeconds: d.drainGraceSeconds,
    ...(d.drainTimeoutSeconds !== undefined ? { drainTimeoutSeconds: d.drainTimeoutSeconds } : {}),
    labels: d.labels,
    ...(continueAsNewAfterEvents ? { continueAsNewAfterEvents } : {}),
  };
  d.replicas[replicaId] = {
    replicaId,
    seq,
    phase: 'Pending',
    reason: 'starting',
    nodes: [],
    gpus: [],
    endpoint: '',
    shards: [],
    placements: 0,
    restarts: 0,
    since: new Date().toISOString(),
    stopping: false,
    revision: revisionOfSnapshot(d.snapshot),
  };
  // Abandon, not terminate: killing a deployment workflow must never orphan running
  // engines; replicas drain only when asked to.
  const handle = await startChild<typeof replica>('replica', {
    workflowId: replicaId,
    taskQueue: CONTROL_TASK_QUEUE,
    args: [input],
    parentClosePolicy: ParentClosePolicy.ABANDON,
    staticSummary: `${d.name} replica ${seq}: ${d.snapshot.model} (${d.snapshot.profile})`,
  });
  return { replicaId, handle };
}
