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
export function validateRolloutRequest(request: RolloutRequest, d: DeploymentState | undefined): void {
  const parsed = RolloutRequestSchema.safeParse(request ?? {});
  if (!parsed.success) throw new Error(`invalid rollout request: ${describeIssues(parsed.error)}`);
  const policy = { ...DEFAULT_POLICY, ...d?.policy };
  const maxSurge = request.maxSurge ?? policy.maxSurge;
  const maxUnavailable = request.maxUnavailable ?? policy.maxUnavailable;
  if (maxSurge === 0 && maxUnavailable === 0)
    throw new Error('maxSurge and maxUnavailable cannot both be 0: the rollout could never start a new replica nor stop an old one');
  if (d?.undeploying) throw new Error(`deployment ${d.name} is being undeployed: nothing to roll out`);
  if ((request.pause || request.resume) && d && !d.rollout)
    throw new Error(`deployment ${d.name} has no rollout to ${request.pause ? 'pause' : 'resume'}`);
}

/**
 * The catalog's current snapshot of a profile of this deployment's model; refusals name the
 * valid choices. The weights stay at the deployment's pinned commit unless the catalog's source
 * changed or `refreshSource` asks for what the ref points at now.
 */
export async function resolveTarget(d: DeploymentState, profile: string | undefined, refreshSource = false): Promise<ProfileSnapshot> {
  try {
    const keepPin = {
      modelSource: d.snapshot.modelSource,
      ...(d.snapshot.sourceAsWritten ? { sourceAsWritten: d.snapshot.sourceAsWritten } : {}),
    };
    const resolved = await control(
      `resolve the rollout target: ${d.model} ${profile ?? d.snapshot.profile}${refreshSource ? ' (source refreshed)' : ''}`,
    ).resolveDeployment({
      model: d.model,
      profile: profile ?? d.snapshot.profile,
      ...(refreshSource ? {} : { keepPin }),
    });
    return resolved.snapshot;
  } catch (error) {
    const cause = error instanceof ActivityFailure ? error.cause : error;
    if (cause instanceof ApplicationFailure) throw ApplicationFailure.nonRetryable(cause.message, cause.type);
    throw error;
  }
}

export function startRollout(d: DeploymentState, to: ProfileSnapshot, request: RolloutRequest, now: string, why: string): void {
  const policy = { ...DEFAULT_POLICY, ...d.policy };
  const from = d.snapshot;
  const reason = `${why}: ${from.profile} ${revisionOfSnapshot(from)} → ${to.profile} ${revisionOfSnapshot(to)}`;
  d.rollout = newRollout(
    from,
    to,
    { maxSurge: request.maxSurge ?? policy.maxSurge, maxUnavailable: request.maxUnavailable ?? policy.maxUnavailable },
    now,
    reason,
  );
  // Asked not to fetch ahead: the rollout's replicas fetch as they start.
  if (request.prefetch === false) d.rollout.prefetch = { state: 'Done', modelSource: to.modelSource, nodes: [] };
  d.snapshot = to;
  log.info(reason);
}

export function rollBack(d: DeploymentState, now: string, reason: string): void {
  const r = d.rollout!;
  if (r.state === 'RollingBack') {
    // The revision it came from fails too: stop moving and say so.
    r.state = 'Failed';
    r.reason = `rolling back failed as well: ${reason}; the deployment holds what it has (\`llmgw rollout ${d.name} --profile P\` to try another)`;
    r.finishedAt = now;
    note(r, now, r.reason);
    return;
  }
  const failedTo = r.to;
  const policy = { maxSurge: r.maxSurge, maxUnavailable: r.maxUnavailable };
  d.rollout = { ...newRollout(failedTo, r.from, policy, now, `rolling back: ${reason}`), state: 'RollingBack' };
  d.snapshot = r.from;
  log.warn(`rolling back ${d.name}: ${reason}`);
}

/** Carries out the planner's next steps; returns true if it changed something (look again). */
export async function driveRollout(
  d: DeploymentState,
  now: string,
  options: {
    continueAsNewAfterEvents?: number;
    markClosed: (id: string, why: string) => void;
    /** Prefetches this run started, by rollout start; a run continued as new starts its own again (it joins or finds them cached). */
    prefetches: Record<string, boolean>;
    wake: () => void;
  },
): Promise<void> {
  const r = d.rollout!;
  if (!isActive(r)) return;
  r.prefetch ??= planPrefetch(r, Object.values(d.replicas));
  if (r.prefetch.state === 'Fetching' && !options.prefetches[r.startedAt]) {
    options.prefetches[r.startedAt] = true;
    const prefetch = r.prefetch;
    note(r, now, `fetching ${prefetch.modelSource} onto ${prefetch.nodes.join(', ')} before draining anything`);
    void prefetchOnHosts(prefetch.modelSource, prefetch.nodes, `rollout of ${d.name}`).then((hosts) => {
      prefetch.state = 'Done';
      const failed = hosts.filter((h) => !h.ok);
      const at = new Date().toISOString();
      if (d.rollout === r)
        note(
          r,
          at,
          failed.length
            ? `weights fetched ahead on ${hosts.length - failed.length} of ${hosts.length} hosts (${failed.map((h) => `${h.nodeId}: ${h.error}`).join('; ')}); the rest fetch as their replicas start`
            : `weights fetched ahead on ${hosts.map((h) => h.nodeId).join(', ')} in ${Math.max(...hosts.map((h) => h.seconds ?? 0)).toFixed(1)} s`,
        );
      options.wake();
    });
  }
  const plan = planRollout(r, Object.values(d.replicas), d.desired, Date.parse(now));
  if (plan.rollback) {
    rollBack(d, now, plan.rollback);
    note(d.rollout!, now, d.rollout!.reason);
    return;
  }
  for (const text of plan.notes) note(r, now, text);
  if (plan.mode) r.mode = plan.mode;
  const target = revisionOfSnapshot(r.to);
  const waiting = Object.values(d.replicas).some((x) => x.revision === target && x.phase === 'Unschedulable' && !x.stopping);
  r.waitingSince = waiting ? (r.waitingSince ?? now) : undefined;
  if (plan.complete) {
    r.state = r.state === 'RollingBack' ? 'RolledBack' : 'Complete';
    r.finishedAt = now;
    if (r.state === 'Complete') d.previous = r.from;
    note(r, now, r.state === 'Complete' ? `complete: every replica runs ${target}` : `rolled back: every replica runs ${target} again`);
    return;
  }
  for (const victim of plan.drain) {
    victim.stopping = true;
    note(r, now, `draining ${victim.replicaId} (${victim.revision ?? 'older revision'})`);
    await getExternalWorkflowHandle(victim.replicaId)
      .signal(stopReplicaSignal, { reason: `rollout to ${target}` })
      .catch(() => undefined);
  }
  for (let i = 0; i < plan.start; i++) {
    const child = await startReplica(d, options.continueAsNewAfterEvents);
    d.replicas[child.replicaId]!.routed = false;
    note(r, now, `started ${child.replicaId} on ${target} (${r.mode})`);
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
export function confirmRouted(d: DeploymentState, asked: Record<string, boolean>, wake: () => void): void {
  for (const replica of Object.values(d.replicas)) {
    if (replica.routed !== false || replica.phase !== 'Ready' || replica.stopping || asked[replica.replicaId]) continue;
    asked[replica.replicaId] = true;
    void awaitRouters(`awaitReplicaRouted: do the routers route to ${replica.replicaId}?`)
      .awaitReplicaRouted({ replicaId: replica.replicaId })
      .then(
        (result) => {
          const tracked = d.replicas[replica.replicaId];
          if (tracked) tracked.routed = true;
          if (d.rollout) note(d.rollout, new Date().toISOString(), `${replica.replicaId} routed (${result.summary})`);
        },
        (error: unknown) => {
          const tracked = d.replicas[replica.replicaId];
          if (tracked) tracked.routed = true;
          if (d.rollout)
            note(
              d.rollout,
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
