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
  deployment: DeploymentState,
  continueAsNewAfterEvents?: number,
): Promise<{ replicaId: string; handle: ChildWorkflowHandle<typeof replica> }> {
  const seq = deployment.nextSeq++;
  const replicaId = replicaWorkflowId(deployment.name, seq);
  const input: ReplicaInput = {
    deployment: deployment.name,
    seq,
    profile: deployment.snapshot,
    deploymentWorkflowId: workflowInfo().workflowId,
    drainGraceSeconds: deployment.drainGraceSeconds,
    ...(deployment.drainTimeoutSeconds !== undefined ? { drainTimeoutSeconds: deployment.drainTimeoutSeconds } : {}),
    labels: deployment.labels,
    ...(continueAsNewAfterEvents ? { continueAsNewAfterEvents } : {}),
  };
  deployment.replicas[replicaId] = {
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
    revision: revisionOfSnapshot(deployment.snapshot),
  };
  // Abandon, not terminate: killing a deployment workflow must never orphan running
  // engines; replicas drain only when asked to.
  const handle = await startChild<typeof replica>('replica', {
    workflowId: replicaId,
    taskQueue: CONTROL_TASK_QUEUE,
    args: [input],
    parentClosePolicy: ParentClosePolicy.ABANDON,
    staticSummary: `${deployment.name} replica ${seq}: ${deployment.snapshot.model} (${deployment.snapshot.profile})`,
  });
  return { replicaId, handle };
}
