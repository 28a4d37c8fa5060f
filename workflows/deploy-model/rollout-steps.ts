// What the deployment workflow does for a rollout: start one (the `rollout` Update, a catalog
// edit under `rollout: auto`), carry out the planner's next steps (rollout.ts), learn when
// routers route to a new replica, and roll back. Workflow side.
import { ActivityFailure, ApplicationFailure, getExternalWorkflowHandle, log } from '@temporalio/workflow';
import { z } from 'zod';
import { FailureType } from '../../common/failures.js';
import type { ProfileSnapshot, RolloutRequest } from '../../common/replica-types.js';
import { revisionOfSnapshot } from '../../common/revision.js';
import { stopReplicaSignal } from '../definitions.js';
import { control, startReplica } from './calls.js';
import { awaitRouters } from '../routes/await.js';
import { isActive, newRollout, note, planPrefetch, planRollout } from './rollout.js';
import { prefetchOnHosts } from '../weights/prefetch.js';
import { DEFAULT_POLICY, type DeploymentState } from './state.js';
import { describeIssues } from '../toolkit.js';

export const RolloutRequestSchema = z
  .strictObject({
    profile: z.string().min(1, 'profile must not be empty').optional(),
    maxSurge: z.int('maxSurge must be a whole number').min(0, 'maxSurge must be ≥ 0').optional(),
    maxUnavailable: z.int('maxUnavailable must be a whole number').min(0, 'maxUnavailable must be ≥ 0').optional(),
    undo: z.boolean().optional(),
    pause: z.boolean().optional(),
    resume: z.boolean().optional(),
    refreshSource: z.boolean().optional(),
    prefetch: z.boolean().optional(),
  })
  .refine((r) => [r.undo, r.pause, r.resume].filter(Boolean).length <= 1, 'choose one of undo, pause and resume');

/** The Update's validator: a bad request is refused before it is recorded, and changes nothing. */
export function validateRolloutRequest(request: RolloutRequest, deployment: DeploymentState | undefined): void {
  const parsed = RolloutRequestSchema.safeParse(request ?? {});
  if (!parsed.success) throw new Error(`invalid rollout request: ${describeIssues(parsed.error)}`);
  const policy = { ...DEFAULT_POLICY, ...deployment?.policy };
  const maxSurge = request.maxSurge ?? policy.maxSurge;
  const maxUnavailable = request.maxUnavailable ?? policy.maxUnavailable;
  if (maxSurge === 0 && maxUnavailable === 0)
    throw new Error('maxSurge and maxUnavailable cannot both be 0: the rollout could never start a new replica nor stop an old one');
  if (deployment?.undeploying) throw new Error(`deployment ${deployment.name} is being undeployed: nothing to roll out`);
  if ((request.pause || request.resume) && deployment && !deployment.rollout)
    throw new Error(`deployment ${deployment.name} has no rollout to ${request.pause ? 'pause' : 'resume'}`);
}

/**
 * The catalog's current snapshot of a profile of this deployment's model; refusals name the
 * valid choices. The weights stay at the deployment's pinned commit unless the catalog's source
 * changed or `refreshSource` asks for what the ref points at now.
 */
export async function resolveTarget(
  deployment: DeploymentState,
  profile: string | undefined,
  refreshSource = false,
): Promise<ProfileSnapshot> {
  try {
    const keepPin = {
      modelSource: deployment.snapshot.modelSource,
      ...(deployment.snapshot.sourceAsWritten ? { sourceAsWritten: deployment.snapshot.sourceAsWritten } : {}),
    };
    const resolved = await control(
      `resolve the rollout target: ${deployment.model} ${profile ?? deployment.snapshot.profile}${refreshSource ? ' (source refreshed)' : ''}`,
    ).resolveDeployment({
      model: deployment.model,
      profile: profile ?? deployment.snapshot.profile,
      ...(refreshSource ? {} : { keepPin }),
    });
    return resolved.snapshot;
  } catch (error) {
    const cause = error instanceof ActivityFailure ? error.cause : error;
    if (cause instanceof ApplicationFailure) throw ApplicationFailure.nonRetryable(cause.message, cause.type);
    throw error;
  }
}

export function startRollout(deployment: DeploymentState, to: ProfileSnapshot, request: RolloutRequest, now: string, why: string): void {
  const policy = { ...DEFAULT_POLICY, ...deployment.policy };
  const from = deployment.snapshot;
  const reason = `${why}: ${from.profile} ${revisionOfSnapshot(from)} → ${to.profile} ${revisionOfSnapshot(to)}`;
  deployment.rollout = newRollout(
    from,
    to,
    { maxSurge: request.maxSurge ?? policy.maxSurge, maxUnavailable: request.maxUnavailable ?? policy.maxUnavailable },
    now,
    reason,
  );
  // Asked not to fetch ahead: the rollout's replicas fetch as they start.
  if (request.prefetch === false) deployment.rollout.prefetch = { state: 'Done', modelSource: to.modelSource, nodes: [] };
  deployment.snapshot = to;
  log.info(reason);
}

export function rollBack(deployment: DeploymentState, now: string, reason: string): void {
  const rollout = deployment.rollout!;
  if (rollout.state === 'RollingBack') {
    // The revision it came from fails too: stop moving and say so.
    rollout.state = 'Failed';
    rollout.reason = `rolling back failed as well: ${reason}; the deployment holds what it has (\`llmgw rollout ${deployment.name} --profile P\` to try another)`;
    rollout.finishedAt = now;
    note(rollout, now, rollout.reason);
    return;
  }
  const failedTo = rollout.to;
  const policy = { maxSurge: rollout.maxSurge, maxUnavailable: rollout.maxUnavailable };
  deployment.rollout = { ...newRollout(failedTo, rollout.from, policy, now, `rolling back: ${reason}`), state: 'RollingBack' };
  deployment.snapshot = rollout.from;
  log.warn(`rolling back ${deployment.name}: ${reason}`);
}

/** Carries out the planner's next steps; returns true if it changed something (look again). */
export async function driveRollout(
  deployment: DeploymentState,
  now: string,
  options: {
    continueAsNewAfterEvents?: number;
    markClosed: (id: string, why: string) => void;
    /** Prefetches this run started, by rollout start; a run continued as new starts its own again (it joins or finds them cached). */
    prefetches: Record<string, boolean>;
    wake: () => void;
  },
): Promise<void> {
  const rollout = deployment.rollout!;
  if (!isActive(rollout)) return;
  rollout.prefetch ??= planPrefetch(rollout, Object.values(deployment.replicas));
  if (rollout.prefetch.state === 'Fetching' && !options.prefetches[rollout.startedAt]) {
    options.prefetches[rollout.startedAt] = true;
    const prefetch = rollout.prefetch;
    note(rollout, now, `fetching ${prefetch.modelSource} onto ${prefetch.nodes.join(', ')} before draining anything`);
    const signed = rollout.to.modelSource === prefetch.modelSource ? rollout.to : undefined;
    void prefetchOnHosts(prefetch.modelSource, prefetch.nodes, `rollout of ${deployment.name}`, signed).then((hosts) => {
      prefetch.state = 'Done';
      const failed = hosts.filter((h) => !h.ok);
      const at = new Date().toISOString();
      if (deployment.rollout === rollout)
        note(
          rollout,
          at,
          failed.length
            ? `weights fetched ahead on ${hosts.length - failed.length} of ${hosts.length} hosts (${failed.map((h) => `${h.nodeId}: ${h.error}`).join('; ')}); the rest fetch as their replicas start`
            : `weights fetched ahead on ${hosts.map((h) => h.nodeId).join(', ')} in ${Math.max(...hosts.map((h) => h.seconds ?? 0)).toFixed(1)} s`,
        );
      options.wake();
    });
  }
  const plan = planRollout(rollout, Object.values(deployment.replicas), deployment.desired, Date.parse(now));
  if (plan.rollback) {
    rollBack(deployment, now, plan.rollback);
    note(deployment.rollout!, now, deployment.rollout!.reason);
    return;
  }
  for (const text of plan.notes) note(rollout, now, text);
  if (plan.mode) rollout.mode = plan.mode;
  const target = revisionOfSnapshot(rollout.to);
  const waiting = Object.values(deployment.replicas).some((x) => x.revision === target && x.phase === 'Unschedulable' && !x.stopping);
  rollout.waitingSince = waiting ? (rollout.waitingSince ?? now) : undefined;
  if (plan.complete) {
    rollout.state = rollout.state === 'RollingBack' ? 'RolledBack' : 'Complete';
    rollout.finishedAt = now;
    if (rollout.state === 'Complete') deployment.previous = rollout.from;
    note(
      rollout,
      now,
      rollout.state === 'Complete' ? `complete: every replica runs ${target}` : `rolled back: every replica runs ${target} again`,
    );
    return;
  }
  for (const victim of plan.drain) {
    victim.stopping = true;
    note(rollout, now, `draining ${victim.replicaId} (${victim.revision ?? 'older revision'})`);
    await getExternalWorkflowHandle(victim.replicaId)
      .signal(stopReplicaSignal, { reason: `rollout to ${target}` })
      .catch(() => undefined);
  }
  for (let i = 0; i < plan.start; i++) {
    const child = await startReplica(deployment, options.continueAsNewAfterEvents);
    deployment.replicas[child.replicaId]!.routed = false;
    note(rollout, now, `started ${child.replicaId} on ${target} (${rollout.mode})`);
    void child.handle.result().then(
      () => options.markClosed(child.replicaId, 'its workflow completed without a final report'),
      (error: unknown) => options.markClosed(child.replicaId, `its workflow ended: ${String((error as Error)?.message ?? error)}`),
    );
  }
}

/**
 * Replicas a rollout started count only once the routers route to them: for each that just
 * turned Ready, ask the routes workflow to confirm (activities/routes.ts), once per run.
 */
export function confirmRouted(deployment: DeploymentState, asked: Record<string, boolean>, wake: () => void): void {
  for (const replica of Object.values(deployment.replicas)) {
    if (replica.routed !== false || replica.phase !== 'Ready' || replica.stopping || asked[replica.replicaId]) continue;
    asked[replica.replicaId] = true;
    void awaitRouters(`awaitReplicaRouted: do the routers route to ${replica.replicaId}?`)
      .awaitReplicaRouted({ replicaId: replica.replicaId })
      .then(
        (result) => {
          const tracked = deployment.replicas[replica.replicaId];
          if (tracked) tracked.routed = true;
          if (deployment.rollout) note(deployment.rollout, new Date().toISOString(), `${replica.replicaId} routed (${result.summary})`);
        },
        (error: unknown) => {
          const tracked = deployment.replicas[replica.replicaId];
          if (tracked) tracked.routed = true;
          if (deployment.rollout)
            note(
              deployment.rollout,
              new Date().toISOString(),
              `${replica.replicaId}: routers did not confirm (${String(error)}); counted as routed`,
            );
        },
      )
      .finally(wake);
  }
}

export function rolloutFailure(message: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(message, FailureType.InvalidInput);
}
