// The deployModel workflow's state (one plain object that crosses continue-as-new) and the
// pure rules that read it: the deployment's phase, its view, the Markdown the Web UI shows.
// Workflow side; no commands here.
import {
  COMING_UP_PHASES,
  type AutoscaleDecision,
  type DeploymentPhase,
  type DeploymentView,
  type LiveRevision,
  type ProfileSnapshot,
  type ReplicaView,
} from '../../common/replica-types.js';
import { autoscalePolicy, type AutoscaleSettings } from '../../common/autoscale.js';
import { revisionOfSnapshot } from '../../common/revision.js';
import { isActive, rolloutView, type RolloutState } from './rollout.js';

/** A replica as its deployment tracks it; `routed` is false until routers confirm a replica a rollout started. */
export type TrackedReplica = ReplicaView & { stopping: boolean; routed?: boolean };

export interface RolloutPolicy {
  maxSurge: number;
  maxUnavailable: number;
  /** A catalog edit to the profile it runs starts a rollout by itself. */
  auto: boolean;
}

export interface DeploymentState {
  name: string;
  model: string;
  snapshot: ProfileSnapshot;
  desired: number;
  maxReplicas: number;
  drainGraceSeconds: number;
  nextSeq: number;
  replicas: Record<string, TrackedReplica>;
  failureTimes: string[];
  undeploying: boolean;
  labels: Record<string, string>;
  /** Why reconciliation rebuilt this deployment from running engines, if it did. */
  rebuilt?: string;
  /** Set while the profile is no longer in the catalog: no new replica is started. */
  catalogProblem?: string;
  policy?: RolloutPolicy;
  /** The current or last rollout. */
  rollout?: RolloutState;
  /** The revision before the last rollout (for `llmgw rollout --undo` once it is complete). */
  previous?: ProfileSnapshot;
  /** The catalog's current revision of the profile, as the control worker last reported it. */
  catalogRevision?: string;
  /** How long a drain waits for in-flight requests before it stops the engine anyway. */
  drainTimeoutSeconds?: number;
  /** Follows load between min and max (common/autoscale.ts); the autoscaler sets `desired`. */
  autoscale?: AutoscaleSettings;
  lastDecision?: AutoscaleDecision & { at: string; from: number };
}

export const DEFAULT_POLICY: RolloutPolicy = { maxSurge: 1, maxUnavailable: 0, auto: false };

/** Failures within this window count towards the replacement backoff. */
export const FAILURE_WINDOW_MS = 10 * 60_000;

export function isTerminal(replica: ReplicaView): boolean {
  return replica.phase === 'Stopped' || replica.phase === 'Failed';
}

export function activeReplicas(deployment: DeploymentState): TrackedReplica[] {
  return Object.values(deployment.replicas).filter((r) => !isTerminal(r));
}

export function deploymentPhase(deployment: DeploymentState): DeploymentPhase {
  const active = activeReplicas(deployment);
  if (deployment.undeploying) return active.length ? 'Undeploying' : 'Undeployed';
  if (isActive(deployment.rollout)) return 'RollingOut';
  // Scaled to zero by its autoscaler: nothing runs, and a request wakes it.
  if (deployment.autoscale && deployment.desired === 0 && !active.length) return 'Idle';
  const ready = active.filter((r) => r.phase === 'Ready' && !r.stopping).length;
  if (ready === deployment.desired && active.length === deployment.desired) return 'Ready';
  // Asleep is up, not failed and not coming up: a request wakes it (docs/sleep.md).
  const sleeping = active.filter((r) => r.phase === 'Sleeping' && !r.stopping).length;
  if (sleeping && ready + sleeping === deployment.desired && active.length === deployment.desired) return ready ? 'Ready' : 'Sleeping';
  if (deployment.catalogProblem) return 'Degraded';
  if (Object.values(deployment.replicas).some((r) => r.phase === 'Unschedulable' || r.phase === 'Failed' || r.phase === 'Unknown'))
    return 'Degraded';
  return 'Progressing';
}

export function deploymentReason(deployment: DeploymentState): string {
  if (deployment.catalogProblem) return deployment.catalogProblem;
  if (deployment.rollout && (isActive(deployment.rollout) || deployment.rollout.state === 'Paused')) {
    const view = rolloutView(deployment.rollout, Object.values(deployment.replicas), deployment.desired);
    const doing =
      deployment.rollout.state === 'RollingBack'
        ? 'rolling back to'
        : deployment.rollout.state === 'Paused'
          ? 'paused on the way to'
          : 'on';
    return `${view.done}/${view.desired} ${doing} revision ${view.to} (${view.mode})${deployment.rollout.reason ? `: ${deployment.rollout.reason}` : ''}`;
  }
  if (deployment.rollout?.state === 'RolledBack' || deployment.rollout?.state === 'Failed') {
    if (deployment.rollout.finishedAt && Date.now() - Date.parse(deployment.rollout.finishedAt) < 3_600_000)
      return `rollout ${deployment.rollout.state}: ${deployment.rollout.reason}`;
  }
  const stuck = Object.values(deployment.replicas).find(
    (r) => r.phase === 'Unschedulable' || r.phase === 'Failed' || r.phase === 'Unknown',
  );
  if (stuck) return `${stuck.replicaId} ${stuck.phase}: ${stuck.reason}`;
  const sleeping = activeReplicas(deployment).filter((r) => r.phase === 'Sleeping').length;
  return sleeping ? `${sleeping} sleeping (a request wakes them)` : '';
}

export function deploymentView(deployment: DeploymentState): DeploymentView {
  return {
    name: deployment.name,
    model: deployment.model,
    profile: deployment.snapshot.profile,
    servedName: deployment.snapshot.servedName,
    phase: deploymentPhase(deployment),
    desired: deployment.desired,
    ready: activeReplicas(deployment).filter((r) => r.phase === 'Ready').length,
    replicas: Object.values(deployment.replicas).sort((a, b) => a.seq - b.seq),
    reason: deploymentReason(deployment),
    ...(deployment.rebuilt ? { rebuilt: deployment.rebuilt } : {}),
    revision: revisionOfSnapshot(deployment.snapshot),
    modelSource: deployment.snapshot.modelSource,
    ...(deployment.catalogRevision && deployment.catalogRevision !== revisionOfSnapshot(deployment.snapshot)
      ? { catalogRevision: deployment.catalogRevision }
      : {}),
    ...(deployment.rollout ? { rollout: rolloutView(deployment.rollout, Object.values(deployment.replicas), deployment.desired) } : {}),
    ...(deployment.autoscale ? { autoscale: autoscaleView(deployment) } : {}),
    ...(deployment.snapshot.sleep ? { sleep: deployment.snapshot.sleep } : {}),
    revisions: liveRevisions(deployment),
  };
}

/**
 * What this deployment may start and route now: its snapshot, and both sides of a rollout that
 * is not over. A query reads it (placement, renewals, route signing); nothing is recorded.
 */
function liveRevisions(deployment: DeploymentState): LiveRevision[] {
  const { rollout } = deployment;
  const inFlight = rollout && (isActive(rollout) || rollout.state === 'Paused') ? [rollout.from, rollout.to] : [];
  const out: LiveRevision[] = [];
  for (const snapshot of [deployment.snapshot, ...inFlight]) {
    const live = { profile: snapshot.profile, revision: revisionOfSnapshot(snapshot), signature: snapshot.signature ?? '' };
    if (!out.some((r) => r.signature === live.signature && r.revision === live.revision)) out.push(live);
  }
  return out;
}

function autoscaleView(deployment: DeploymentState): NonNullable<DeploymentView['autoscale']> {
  const policy = autoscalePolicy(deployment.autoscale!);
  return {
    min: policy.min,
    max: policy.max,
    metric: policy.metric,
    target: policy.target,
    ...(policy.idleToZeroSeconds !== undefined ? { idleToZeroSeconds: policy.idleToZeroSeconds } : {}),
    upAfterSeconds: policy.upAfterSeconds,
    downAfterSeconds: policy.downAfterSeconds,
    tolerance: policy.tolerance,
    ...(deployment.lastDecision ? { lastDecision: deployment.lastDecision } : {}),
  };
}

/** Forgets finished replicas once reported, keeping the last few visible; ages out old failures. */
export function pruneFinished(deployment: DeploymentState, nowMs: number): void {
  const finished = Object.values(deployment.replicas).filter(isTerminal);
  for (const r of finished.slice(0, Math.max(0, finished.length - 5))) delete deployment.replicas[r.replicaId];
  deployment.failureTimes = deployment.failureTimes.filter((t) => nowMs - Date.parse(t) < FAILURE_WINDOW_MS);
}

/** Failed replicas are replaced at once, then with growing delays if they keep failing. */
export function replacementDelayMs(failureTimes: string[], nowMs: number): number {
  if (failureTimes.length < 2) return 0;
  const last = Date.parse(failureTimes[failureTimes.length - 1]!);
  const delay = Math.min(120_000, 5_000 * 2 ** (failureTimes.length - 2));
  return Math.max(0, last + delay - nowMs);
}

/**
 * Which replicas to drain for a smaller count: those not up first, then sleeping ones (the one
 * asleep longest first: a sleeper past its stopAfterSeconds asks for exactly this), then Ready
 * ones; the newest first within each.
 */
export function drainVictims(serving: TrackedReplica[], desired: number): TrackedReplica[] {
  const order = (r: TrackedReplica): number => (r.phase === 'Ready' ? 2 : r.phase === 'Sleeping' ? 1 : 0);
  const asleepSince = (r: TrackedReplica): string => r.sleep?.since ?? r.since;
  return [...serving]
    .sort(
      (a, b) =>
        order(a) - order(b) ||
        (a.phase === 'Sleeping' && b.phase === 'Sleeping' ? asleepSince(a).localeCompare(asleepSince(b)) : 0) ||
        b.seq - a.seq,
    )
    .slice(0, Math.max(0, serving.length - desired));
}

function sleepingCount(view: DeploymentView): number {
  return view.replicas.filter((r) => r.phase === 'Sleeping').length;
}

export function deploymentDetails(view: DeploymentView): string {
  const lines = [
    `**${view.name}** — **${view.phase}**: ${view.ready}/${view.desired} replicas Ready${sleepingCount(view) ? `, ${sleepingCount(view)} sleeping` : ''}`,
    '',
    `${view.model} · profile ${view.profile} · revision ${view.revision ?? '—'} · served as \`${view.servedName}\``,
    '',
    ...(view.modelSource ? [`Weights: \`${view.modelSource}\``, ''] : []),
    ...(view.autoscale
      ? [
          `Autoscaled ${view.autoscale.min}–${view.autoscale.max} on ${view.autoscale.metric} (target ${view.autoscale.target} per replica${view.autoscale.idleToZeroSeconds ? `, idle to zero after ${view.autoscale.idleToZeroSeconds} s` : ''})${view.autoscale.lastDecision ? `; last decision ${view.autoscale.lastDecision.from} → ${view.autoscale.lastDecision.desired} at ${view.autoscale.lastDecision.at}: ${view.autoscale.lastDecision.reason}` : ''}`,
          '',
        ]
      : []),
    ...(view.catalogRevision ? [`The catalog has a newer revision (${view.catalogRevision}): \`llmgw rollout ${view.name}\``, ''] : []),
    ...(view.rollout
      ? [
          `Rollout ${view.rollout.fromProfile} ${view.rollout.from} → ${view.rollout.toProfile} ${view.rollout.to}: ${view.rollout.state}, ${view.rollout.done}/${view.rollout.desired} (${view.rollout.mode})`,
          '',
          ...view.rollout.steps.map((step) => `- ${step}`),
          '',
        ]
      : []),
    ...(view.reason ? [view.reason, ''] : []),
    ...(view.rebuilt ? [`Rebuilt: ${view.rebuilt}`, ''] : []),
    '| replica | state | nodes | GPUs | endpoint | reason |',
    '| --- | --- | --- | --- | --- | --- |',
  ];
  for (const r of view.replicas) {
    // A replica reports only what the deployment acts on: its steps of coming up live in its own
    // workflow's details (and in `llmgw status`, which asks it).
    const comingUp = COMING_UP_PHASES.includes(r.phase) ? ' (coming up: its own workflow shows the step)' : '';
    lines.push(
      `| ${r.seq} | ${r.phase}${comingUp} | ${r.nodes.join(', ') || '—'} | ${r.gpus.join(' ') || '—'} | ${r.endpoint || '—'} | ${r.reason.replace(/\|/g, '/')} |`,
    );
  }
  return lines.join('\n');
}
