// Reconciliation's control activity rebuildReplica: a replica (and its deployment) that
// Temporal lost, started again in adopt mode around the engines that never stopped.
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import type { Catalog } from '../catalog/schema.js';
import { sleepEngineArgs, sleepPolicy } from '../catalog/sleep.js';
import { CONTROL_TASK_QUEUE, deploymentWorkflowId } from '../common/names.js';
import type { DeployModelInput, ProfileSnapshot, ReplicaInput } from '../common/replica-types.js';
import type { ReconcileAction } from '../common/reconcile-types.js';
import { adoptReplicaSignal } from '../workflows/definitions.js';
import { workflowPresence } from './reconcile-facts.js';

export interface RebuildRequest {
  action: Extract<ReconcileAction, { kind: 'rebuild' }>;
  drainGraceSeconds: number;
}

export interface RebuildOutcome {
  replicaStarted: boolean;
  deploymentStarted: boolean;
}

/**
 * Starts a lost replica in adopt mode under its old id, joined to its deployment, which
 * is rebuilt (desired = what was found) when it is gone too. Signal-with-start makes two
 * nodes rebuilding replicas of one deployment at once end with one deployment.
 */
export async function rebuildReplica(client: Client, request: RebuildRequest, catalog: Catalog): Promise<RebuildOutcome> {
  const { action } = request;
  const deploymentId = deploymentWorkflowId(action.deployment);
  const deploymentWasRunning = (await workflowPresence(client, deploymentId)) === 'running';
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
    profile: withCatalogSleep(catalog, action.snapshot),
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
}

/**
 * A rebuilt replica's sleep policy. Its timings are not in the engine's spec (they travel beside
 * the revision, docs/sleep.md), so they come from the catalog's profile of the same name, and
 * only when the engine was started able to sleep as that policy starts one (its flags and env):
 * without them, a sleeping engine would be adopted Ready, routable and never woken.
 */
export function withCatalogSleep(catalog: Catalog, snapshot: ProfileSnapshot): ProfileSnapshot {
  const profile = catalog.models.find((m) => m.name === snapshot.model)?.profiles.find((p) => p.name === snapshot.profile);
  const sleep = sleepPolicy(profile?.sleep);
  if (snapshot.sleep || !sleep) return snapshot;
  const { args, env } = sleepEngineArgs(snapshot.engine, sleep);
  const hasArgs = args.length === 0 || snapshot.args.some((_, at) => args.every((arg, i) => snapshot.args[at + i] === arg));
  const hasEnv = Object.entries(env).every(([name, value]) => snapshot.env[name] === value);
  return hasArgs && hasEnv ? { ...snapshot, sleep } : snapshot;
}
