// The per-node Schedule that runs reconcileNode every --reconcile-every-seconds of the node's
// agent (3,600 by default), phased by the node's id: defined once (reconcileSchedule), created,
// updated or deleted to match the agent's settings. Control activities.
import {
  ScheduleAlreadyRunning,
  ScheduleNotFoundError,
  ScheduleOverlapPolicy,
  type Client,
  type ScheduleOptions,
} from '@temporalio/client';
import { CONTROL_TASK_QUEUE, reconcileScheduleId } from '../common/names.js';
import type { ReconcileNodeInput } from '../common/reconcile-types.js';

export interface ReconcileScheduleRequest {
  nodeId: string;
  /** 0 means no Schedule: reconcile on registration only. */
  everySeconds: number;
  dryRun: boolean;
}

/**
 * A node's reconcile interval, phased by its id: interval Schedules fire on multiples of the
 * interval since the epoch, so without an offset every host of a fleet reconciled at the top of
 * the hour at once (bench:fleet at 200 hosts: 200 reconciles in the same minute).
 */
export function reconcileInterval(nodeId: string, everySeconds: number): { every: string; offset: string; offsetSeconds: number } {
  let hash = 0x811c9dc5;
  for (let i = 0; i < nodeId.length; i++) hash = Math.imul(hash ^ nodeId.charCodeAt(i), 0x01000193) >>> 0;
  const offsetSeconds = hash % Math.max(1, Math.floor(everySeconds));
  return { every: `${everySeconds} seconds`, offset: `${offsetSeconds} seconds`, offsetSeconds };
}

/**
 * The node's reconcile Schedule: a scheduled run of reconcileNode every interval; a run still
 * going when the next is due makes it skip, and one missed while the server was down is caught
 * up only within a minute.
 */
function reconcileSchedule(request: ReconcileScheduleRequest): ScheduleOptions {
  const { every, offset } = reconcileInterval(request.nodeId, request.everySeconds);
  const input: ReconcileNodeInput = { nodeId: request.nodeId, trigger: 'schedule', dryRun: request.dryRun };
  return {
    scheduleId: reconcileScheduleId(request.nodeId),
    spec: { intervals: [{ every, offset }] },
    action: {
      type: 'startWorkflow',
      workflowType: 'reconcileNode',
      workflowId: `reconcile/${request.nodeId}/scheduled`,
      taskQueue: CONTROL_TASK_QUEUE,
      args: [input],
    },
    policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1 minute' },
    state: { note: `reconciles node ${request.nodeId} with what its agent reports` },
  };
}

export function createReconcileScheduleActivities(client: Client) {
  return {
    /**
     * Makes the node's reconcile Schedule match the agent's current settings: creates it, or
     * updates its interval and mode when they changed (an agent restarted with other flags).
     * Every 0 seconds deletes it (reconcile on registration only).
     */
    async syncReconcileSchedule(request: ReconcileScheduleRequest): Promise<'created' | 'updated' | 'unchanged' | 'deleted'> {
      const handle = client.schedule.getHandle(reconcileScheduleId(request.nodeId));
      const existing = await handle.describe().catch((error: unknown) => {
        if (error instanceof ScheduleNotFoundError) return undefined;
        throw error;
      });
      if (request.everySeconds <= 0) {
        if (!existing) return 'unchanged';
        await handle.delete();
        return 'deleted';
      }
      const wanted = reconcileSchedule(request);
      if (!existing) {
        await client.schedule.create(wanted);
        return 'created';
      }
      const current = existing.spec.intervals?.[0];
      const currentArgs =
        existing.action.type === 'startWorkflow' ? (existing.action.args?.[0] as ReconcileNodeInput | undefined) : undefined;
      if (
        Number(current?.every) === request.everySeconds * 1000 &&
        Number(current?.offset ?? 0) === reconcileInterval(request.nodeId, request.everySeconds).offsetSeconds * 1000 &&
        (currentArgs?.dryRun ?? false) === request.dryRun
      )
        return 'unchanged';
      await handle.update((previous) => ({
        ...previous,
        spec: { ...previous.spec, intervals: wanted.spec.intervals },
        action: {
          ...previous.action,
          type: 'startWorkflow',
          workflowType: 'reconcileNode',
          args: wanted.action.args,
        } as typeof previous.action,
      }));
      return 'updated';
    },

    /**
     * Creates the node's reconcile Schedule if it does not exist. Node workflows of builds before
     * the first release (0.2.0) call it instead of syncReconcileSchedule; kept while such a run may
     * still be going (`llmgw upgrade` ends them).
     */
    async ensureReconcileSchedule(request: ReconcileScheduleRequest): Promise<boolean> {
      try {
        await client.schedule.create(reconcileSchedule(request));
        return true;
      } catch (error) {
        if (error instanceof ScheduleAlreadyRunning) return false;
        throw error;
      }
    },
  };
}
