// Reconciliation's control activities: what Temporal and the catalog know about the
// shards an agent reports (inspectNode), rebuilding a replica and its deployment that
// Temporal lost (rebuildReplica), making a node's allocations match the report
// (reconcileAllocations), and the per-node Schedule that runs reconcileNode.
import {
  ScheduleAlreadyRunning,
  ScheduleNotFoundError,
  ScheduleOverlapPolicy,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  type Client,
} from '@temporalio/client';
import type { CatalogSource } from '../catalog/watch.js';
import { CONTROL_TASK_QUEUE, deploymentWorkflowId, nodeWorkflowId, parseReplicaWorkflowId, reconcileScheduleId } from '../common/names.js';
import type { NodeView, ReconcileAllocationsRequest, ReconcileAllocationsResult } from '../common/node-types.js';
import type { DeployModelInput, ReplicaInput, ReplicaView } from '../common/replica-types.js';
import {
  ENDED_TO_BE_ADOPTED,
  type ReconcileAction,
  type ReconcileFacts,
  type ReconcileNodeInput,
  type ReplicaFacts,
  type WorkflowPresence,
} from '../common/reconcile-types.js';
import { wakeWaitersFor } from './capacity.js';
import { adoptReplicaSignal, describeNodeQuery, reconcileAllocationsUpdate, replicaStatusQuery } from '../workflows/definitions.js';

export interface InspectRequest {
  nodeId: string;
  /** Every replica id a reported shard or an allocation names. */
  replicaIds: string[];
  /** `${model}/${profile}` pairs the reported shards run. */
  profiles: { model: string; profile: string }[];
}

export interface RebuildOutcome {
  replicaStarted: boolean;
  deploymentStarted: boolean;
}

export function createReconcileActivities(catalog: CatalogSource, client: Client) {
  /** Whether `llmgw upgrade` ended this run for reconciliation to rebuild (its reason says so). */
  const endedToBeAdopted = async (workflowId: string, runId: string): Promise<boolean> => {
    const response = await client.workflowService.getWorkflowExecutionHistoryReverse({
      namespace: client.options.namespace,
      execution: { workflowId, runId },
      maximumPageSize: 1,
    });
    return (response.history?.events?.[0]?.workflowExecutionTerminatedEventAttributes?.reason ?? '').startsWith(ENDED_TO_BE_ADOPTED);
  };
  const presence = async (workflowId: string): Promise<WorkflowPresence> => {
    try {
      const description = await client.workflow.getHandle(workflowId).describe();
      if (description.status.name === 'RUNNING') return 'running';
      // A run ended to move it to a new build counts as lost: its engines are adopted, not stopped.
      if (description.status.name === 'TERMINATED' && (await endedToBeAdopted(workflowId, description.runId))) return 'missing';
      return 'closed';
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) return 'missing';
      throw error;
    }
  };

  return {
    /** What Temporal and the catalog say about the replicas a node's report names. */
    async inspectNode(request: InspectRequest): Promise<ReconcileFacts> {
      const node = await client.workflow
        .getHandle(nodeWorkflowId(request.nodeId))
        .query(describeNodeQuery)
        .catch((error: unknown): NodeView | undefined => {
          if (error instanceof WorkflowNotFoundError) return undefined;
          throw error;
        });
      const replicaIds = new Set([...request.replicaIds, ...(node?.allocations ?? []).map((a) => a.replicaId)]);
      const replicas: Record<string, ReplicaFacts> = {};
      // Replicas of one deployment share its answer: ask once per deployment.
      const deployments = new Map<string, Promise<WorkflowPresence>>();
      for (const replicaId of replicaIds) {
        const replica = await presence(replicaId);
        const deploymentName = parseReplicaWorkflowId(replicaId)?.deployment;
        if (deploymentName && !deployments.has(deploymentName))
          deployments.set(deploymentName, presence(deploymentWorkflowId(deploymentName)));
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
    },

    /**
     * Starts a lost replica in adopt mode under its old id, joined to its deployment, which
     * is rebuilt (desired = what was found) when it is gone too. Signal-with-start makes two
     * nodes rebuilding replicas of one deployment at once end with one deployment.
     */
    async rebuildReplica(request: {
      action: Extract<ReconcileAction, { kind: 'rebuild' }>;
      drainGraceSeconds: number;
    }): Promise<RebuildOutcome> {
      const { action } = request;
      const deploymentId = deploymentWorkflowId(action.deployment);
      const deploymentWasRunning = (await presence(deploymentId)) === 'running';
      const deployInput: DeployModelInput = {
        model: action.snapshot.model,
        name: action.deployment,
        profile: action.snapshot.profile,
        replicas: 0,
        ...(action.pool ? { labels: { pool: action.pool } } : {}),
        rebuilt: { reason: `rebuilt by reconciliation from running engines: ${action.reason}` },
      };
      // The deployment first, so that it knows the replica before the replica reports to it.
      await client.workflow.signalWithStart('deployModel', {
        workflowId: deploymentId,
        taskQueue: CONTROL_TASK_QUEUE,
        args: [deployInput],
        signal: adoptReplicaSignal,
        signalArgs: [{ replicaId: action.replicaId, seq: action.seq, reason: action.reason }],
        memo: { rebuilt: true },
        staticSummary: `${action.deployment}: ${action.snapshot.model} (${action.snapshot.profile}), rebuilt from running engines`,
      });
      // The snapshot was read back from the running engine's spec (snapshotFromEngineProfile),
      // signature included: the engine was verified when it started, and a restart of it by
      // the rebuilt replica verifies again against the same signature.
      const input: ReplicaInput = {
        deployment: action.deployment,
        seq: action.seq,
        profile: action.snapshot,
        deploymentWorkflowId: deploymentId,
        drainGraceSeconds: request.drainGraceSeconds,
        ...(action.pool ? { labels: { pool: action.pool } } : {}),
        adopt: action.shards,
      };
      let replicaStarted = true;
      try {
        await client.workflow.start('replica', {
          workflowId: action.replicaId,
          taskQueue: CONTROL_TASK_QUEUE,
          args: [input],
          memo: { rebuilt: true },
          staticSummary: `${action.deployment} replica ${action.seq}: ${action.snapshot.model} (${action.snapshot.profile}), adopted running engines`,
        });
      } catch (error) {
        // Another node's reconciliation (or a retry of this one) got there first.
        if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
        replicaStarted = false;
      }
      return { replicaStarted, deploymentStarted: !deploymentWasRunning };
    },

    async reconcileAllocations(request: { nodeId: string } & ReconcileAllocationsRequest): Promise<ReconcileAllocationsResult> {
      const result = await client.workflow.getHandle(nodeWorkflowId(request.nodeId)).executeUpdate(reconcileAllocationsUpdate, {
        args: [{ claims: request.claims, releases: request.releases }],
      });
      // GPUs freed by reconciliation go to the replicas waiting for them.
      if (result.released.length) await wakeWaitersFor(client, request.nodeId).catch(() => undefined);
      return result;
    },

    /**
     * Makes the node's reconcile Schedule match the agent's current settings: creates it, or
     * updates its interval and mode when they changed (an agent restarted with other flags).
     * Every 0 seconds deletes it (reconcile on registration only).
     */
    async syncReconcileSchedule(request: {
      nodeId: string;
      everySeconds: number;
      dryRun: boolean;
    }): Promise<'created' | 'updated' | 'unchanged' | 'deleted'> {
      const input: ReconcileNodeInput = { nodeId: request.nodeId, trigger: 'schedule', dryRun: request.dryRun };
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
      const interval = reconcileInterval(request.nodeId, request.everySeconds);
      if (!existing) {
        await client.schedule.create({
          scheduleId: reconcileScheduleId(request.nodeId),
          spec: { intervals: [intervalSpec(interval)] },
          action: {
            type: 'startWorkflow',
            workflowType: 'reconcileNode',
            workflowId: `reconcile/${request.nodeId}/scheduled`,
            taskQueue: CONTROL_TASK_QUEUE,
            args: [input],
          },
          policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1 minute' },
          state: { note: `reconciles node ${request.nodeId} with what its agent reports` },
        });
        return 'created';
      }
      const everyMs = existing.spec.intervals?.[0]?.every;
      const offsetMs = existing.spec.intervals?.[0]?.offset;
      const currentArgs =
        existing.action.type === 'startWorkflow' ? (existing.action.args?.[0] as ReconcileNodeInput | undefined) : undefined;
      if (
        Number(everyMs) === request.everySeconds * 1000 &&
        Number(offsetMs ?? 0) === interval.offsetSeconds * 1000 &&
        (currentArgs?.dryRun ?? false) === request.dryRun
      )
        return 'unchanged';
      await handle.update((previous) => ({
        ...previous,
        spec: { ...previous.spec, intervals: [intervalSpec(interval)] },
        action: { ...previous.action, type: 'startWorkflow', workflowType: 'reconcileNode', args: [input] } as typeof previous.action,
      }));
      return 'updated';
    },

    /** Creates the node's reconcile Schedule if it does not exist (idempotent). */
    async ensureReconcileSchedule(request: { nodeId: string; everySeconds: number; dryRun: boolean }): Promise<boolean> {
      const input: ReconcileNodeInput = { nodeId: request.nodeId, trigger: 'schedule', dryRun: request.dryRun };
      try {
        await client.schedule.create({
          scheduleId: reconcileScheduleId(request.nodeId),
          spec: { intervals: [intervalSpec(reconcileInterval(request.nodeId, request.everySeconds))] },
          action: {
            type: 'startWorkflow',
            workflowType: 'reconcileNode',
            workflowId: `reconcile/${request.nodeId}/scheduled`,
            taskQueue: CONTROL_TASK_QUEUE,
            args: [input],
          },
          policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1 minute' },
          state: { note: `reconciles node ${request.nodeId} with what its agent reports` },
        });
        return true;
      } catch (error) {
        if (error instanceof ScheduleAlreadyRunning) return false;
        throw error;
      }
    },
  };
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

function intervalSpec(interval: { every: string; offset: string }): { every: string; offset: string } {
  return { every: interval.every, offset: interval.offset };
}
