// FROZEN: the deployModel workflow as it was before Worker Versioning (commit 2d2f513), kept so that
// runs started by that release replay exactly. Do not change what it does; see docs/upgrades.md.
import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  log,
  ParentClosePolicy,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  startChild,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { ControlActivities } from '../../activities/index.js';
import { CONTROL_TASK_QUEUE, replicaWorkflowId } from '../../common/names.js';
import { FailureType } from '../../common/failures.js';
import { SA } from '../../common/search-attributes.js';
import type {
  DeployModelInput,
  DeploymentPhase,
  DeploymentView,
  ProfileSnapshot,
  ReplicaInput,
  ReplicaView,
} from '../../common/replica-types.js';
import {
  adoptReplicaSignal,
  deploymentStatusQuery,
  replicaClosedSignal,
  replicaStatusSignal,
  scaleUpdate,
  stopReplicaSignal,
  undeployUpdate,
} from '../definitions.js';
import { DEPLOYMENT_NAME, DeployModelInputSchema, describeIssues } from './deploy-input-v0.js';
import type { replica } from '../replica/workflow.js';
import { prepareUpgradeSignal } from '../upgrade.js';

const HISTORY_LIMIT = 5_000;
const FAILURE_WINDOW_MS = 10 * 60_000;

interface DeploymentState {
  name: string;
  model: string;
  snapshot: ProfileSnapshot;
  desired: number;
  maxReplicas: number;
  drainGraceSeconds: number;
  nextSeq: number;
  replicas: Record<string, ReplicaView & { stopping: boolean }>;
  failureTimes: string[];
  undeploying: boolean;
  labels: Record<string, string>;
  /** Why reconciliation rebuilt this deployment from running engines, if it did. */
  rebuilt?: string;
  /** Set while the profile is no longer in the catalog: no new replica is started. */
  catalogProblem?: string;
}

const catalog = proxyActivities<ControlActivities>({
  startToCloseTimeout: '20 seconds',
  retry: { maximumAttempts: 5 },
  summary: 'profileInCatalog: is the profile still in the catalog before starting a replica',
});

const control = proxyActivities<ControlActivities>({
  // Control activities are quick; a short timeout lets a killed worker's work move on fast.
  startToCloseTimeout: '20 seconds',
  retry: {
    maximumAttempts: 5,
    nonRetryableErrorTypes: [FailureType.UnknownModel, FailureType.UnknownProfile, FailureType.UnknownGpuClass, FailureType.InvalidInput],
  },
  summary: 'resolveDeployment: check the request against the catalog and the fleet',
});

export async function deployModelV0(rawInput: DeployModelInput): Promise<DeploymentView> {
  const parsed = DeployModelInputSchema.safeParse(rawInput);
  if (!parsed.success)
    throw ApplicationFailure.nonRetryable(`invalid deployModel input: ${describeIssues(parsed.error)}`, FailureType.InvalidInput);
  const input = parsed.data;
  const idName = workflowInfo().workflowId.replace(/^deployment\//, '');
  const name = input.name ?? idName;
  if (!DEPLOYMENT_NAME.test(name))
    throw ApplicationFailure.nonRetryable(
      `deployment name "${name}" is not valid: lowercase letters, digits, ".", "_" or "-"`,
      FailureType.InvalidInput,
    );
  if (workflowInfo().workflowId !== `deployment/${name}`) {
    throw ApplicationFailure.nonRetryable(
      `a deployment named "${name}" must run as workflow id deployment/${name}, not ${workflowInfo().workflowId}`,
      FailureType.InvalidInput,
    );
  }

  let state = input.carried as DeploymentState | undefined;
  // The status query answers from the start, so a deployment that is still being
  // checked against the catalog says so instead of "no such query".
  setHandler(deploymentStatusQuery, (): DeploymentView => ({
    name,
    model: input.model,
    profile: input.profile ?? '',
    servedName: '',
    phase: 'Validating',
    desired: input.replicas,
    ready: 0,
    replicas: [],
    reason: 'checking the request against the catalog and the fleet',
  }));
  if (!state) {
    let resolved: Awaited<ReturnType<ControlActivities['resolveDeployment']>>;
    try {
      resolved = await control.resolveDeployment({ model: input.model, profile: input.profile, gpuClass: input.gpuClass });
    } catch (error) {
      // Name the problem and the valid choices, holding nothing.
      const cause = error instanceof ActivityFailure ? error.cause : error;
      if (cause instanceof ApplicationFailure) throw ApplicationFailure.nonRetryable(cause.message, cause.type);
      throw error;
    }
    if (input.replicas > resolved.maxReplicas) {
      throw ApplicationFailure.nonRetryable(
        `replicas ${input.replicas} is over the maximum of ${resolved.maxReplicas} (catalog defaults.maxReplicas)`,
        FailureType.InvalidInput,
      );
    }
    state = {
      name,
      model: input.model,
      snapshot: resolved.snapshot,
      desired: input.replicas,
      maxReplicas: resolved.maxReplicas,
      drainGraceSeconds: resolved.drainGraceSeconds,
      nextSeq: 1,
      replicas: {},
      failureTimes: [],
      undeploying: false,
      labels: input.labels ?? {},
      ...(input.rebuilt ? { rebuilt: input.rebuilt.reason } : {}),
    };
  }
  const s: DeploymentState = state;
  let dirty = true;

  const active = (): (ReplicaView & { stopping: boolean })[] =>
    Object.values(s.replicas).filter((r) => r.phase !== 'Stopped' && r.phase !== 'Failed');
  const phase = (): DeploymentPhase => {
    if (s.undeploying) return active().length ? 'Undeploying' : 'Undeployed';
    const ready = active().filter((r) => r.phase === 'Ready' && !r.stopping).length;
    if (ready === s.desired && active().length === s.desired) return 'Ready';
    if (s.catalogProblem) return 'Degraded';
    if (Object.values(s.replicas).some((r) => r.phase === 'Unschedulable' || r.phase === 'Failed' || r.phase === 'Unknown'))
      return 'Degraded';
    return 'Progressing';
  };
  const view = (): DeploymentView => ({
    name: s.name,
    model: s.model,
    profile: s.snapshot.profile,
    servedName: s.snapshot.servedName,
    phase: phase(),
    desired: s.desired,
    ready: active().filter((r) => r.phase === 'Ready').length,
    replicas: Object.values(s.replicas).sort((a, b) => a.seq - b.seq),
    reason: reasonOf(s),
    ...(s.rebuilt ? { rebuilt: s.rebuilt } : {}),
  });

  // Set before replicaStatus: signals that arrived while the deployment was being resolved
  // are delivered handler by handler, and a rebuilt replica must be known before it reports.
  setHandler(adoptReplicaSignal, ({ replicaId, seq, reason }) => {
    if (s.replicas[replicaId]) return;
    log.info(`adopting ${replicaId}: ${reason}`);
    s.replicas[replicaId] = {
      replicaId,
      seq,
      phase: 'Pending',
      reason: 'rebuilt by reconciliation; waiting for its first report',
      nodes: [],
      gpus: [],
      endpoint: '',
      shards: [],
      placements: 1,
      restarts: 0,
      since: new Date().toISOString(),
      stopping: false,
    };
    s.nextSeq = Math.max(s.nextSeq, seq + 1);
    // A rebuilt deployment wants what was found running; a live one keeps its own count
    // (and drains the extra replica if it has too many).
    if (s.rebuilt && !s.undeploying) s.desired = Math.min(s.maxReplicas, Math.max(s.desired, active().length));
    dirty = true;
  });
  setHandler(replicaStatusSignal, (replicaView) => {
    const previous = s.replicas[replicaView.replicaId];
    if (!previous) return; // a replica of an older deployment with this name
    s.replicas[replicaView.replicaId] = { ...replicaView, stopping: previous.stopping };
    if (replicaView.phase === 'Failed' && previous.phase !== 'Failed') s.failureTimes.push(new Date().toISOString());
    dirty = true;
  });
  setHandler(replicaClosedSignal, ({ replicaId, reason }) => {
    const previous = s.replicas[replicaId];
    if (!previous || previous.phase === 'Stopped' || previous.phase === 'Failed') return;
    log.warn(`${replicaId} ended without reporting: ${reason}`);
    // Failed, to be seen and replaced, but not counted towards the crash-loop backoff: the
    // workflow was ended from outside, its engine did not fail.
    s.replicas[replicaId] = { ...previous, phase: 'Failed', reason, since: new Date().toISOString() };
    dirty = true;
  });
  setHandler(
    scaleUpdate,
    (replicas) => {
      s.desired = replicas;
      dirty = true;
      return view();
    },
    {
      validator: (replicas) => {
        if (!Number.isInteger(replicas) || replicas < 0 || replicas > s.maxReplicas)
          throw new Error(`replicas must be a whole number from 0 to ${s.maxReplicas}, got ${replicas}`);
        if (s.undeploying) throw new Error(`deployment ${s.name} is being undeployed`);
      },
    },
  );
  setHandler(undeployUpdate, () => {
    s.undeploying = true;
    s.desired = 0;
    dirty = true;
    return view();
  });
  setHandler(deploymentStatusQuery, view);
  // Added after the freeze, issuing nothing unless `llmgw upgrade` asks: hand over to the new code.
  let upgrade = false;
  setHandler(prepareUpgradeSignal, () => {
    upgrade = true;
    dirty = true;
  });

  const publish = (): void => {
    upsertSearchAttributes([
      { key: SA.deployment, value: s.name },
      { key: SA.model, value: s.model },
      { key: SA.state, value: phase() },
      { key: SA.gpuClass, value: s.snapshot.gpuClass },
    ]);
    upsertMemo({
      deployment: {
        name: s.name,
        model: s.model,
        profile: s.snapshot.profile,
        desired: s.desired,
        ...(s.rebuilt ? { rebuilt: s.rebuilt } : {}),
      },
    });
    setCurrentDetails(deploymentDetails(view()));
  };

  for (;;) {
    dirty = false;
    // Forget finished replicas once they are reported, keeping the last few failures visible.
    const finished = Object.values(s.replicas).filter((r) => r.phase === 'Stopped' || r.phase === 'Failed');
    for (const r of finished.slice(0, Math.max(0, finished.length - 5))) delete s.replicas[r.replicaId];
    s.failureTimes = s.failureTimes.filter((t) => Date.now() - Date.parse(t) < FAILURE_WINDOW_MS);

    const serving = active().filter((r) => !r.stopping);
    let waitMs: number | undefined;
    if (serving.length < s.desired) {
      const delay = replacementDelayMs(s.failureTimes);
      if (delay > 0) {
        waitMs = delay;
        log.info(`replacing failed replicas in ${Math.round(delay / 1000)} s (${s.failureTimes.length} failures in the last 10 min)`);
      } else if (await profileStillInCatalog(s)) {
        for (let i = serving.length; i < s.desired; i++) await startReplica(s);
      } else {
        waitMs = 60_000;
      }
    } else if (serving.length > s.desired) {
      // Drain the least useful first: not Ready before Ready, then the newest.
      const victims = [...serving]
        .sort((a, b) => Number(a.phase === 'Ready') - Number(b.phase === 'Ready') || b.seq - a.seq)
        .slice(0, serving.length - s.desired);
      for (const victim of victims) {
        victim.stopping = true;
        await getExternalWorkflowHandle(victim.replicaId)
          .signal(stopReplicaSignal, { reason: s.undeploying ? 'undeploy' : `scaled to ${s.desired}` })
          .catch(() => undefined);
      }
    }
    publish();
    if (s.undeploying && !active().length) break;
    if (upgrade || workflowInfo().continueAsNewSuggested || workflowInfo().historyLength > HISTORY_LIMIT) {
      await condition(allHandlersFinished);
      await continueAsNew<typeof deployModelV0>({ ...input, carried: s });
    }
    if (waitMs === undefined) await condition(() => dirty);
    else await condition(() => dirty, waitMs);
  }
  await condition(allHandlersFinished);
  return view();
}

async function startReplica(s: DeploymentState): Promise<void> {
  const seq = s.nextSeq++;
  const replicaId = replicaWorkflowId(s.name, seq);
  const input: ReplicaInput = {
    deployment: s.name,
    seq,
    profile: s.snapshot,
    deploymentWorkflowId: workflowInfo().workflowId,
    drainGraceSeconds: s.drainGraceSeconds,
    labels: s.labels,
  };
  s.replicas[replicaId] = {
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
  };
  // Abandon, not terminate: killing a deployment workflow must never orphan running
  // engines; replicas drain only when asked to.
  await startChild<typeof replica>('replica', {
    workflowId: replicaId,
    taskQueue: CONTROL_TASK_QUEUE,
    args: [input],
    parentClosePolicy: ParentClosePolicy.ABANDON,
    staticSummary: `${s.name} replica ${seq}: ${s.snapshot.model} (${s.snapshot.profile})`,
  });
}

/**
 * A replacement or scale-up runs the deployment's snapshot; if its profile has left the
 * catalog since, starting it would bring back what the operator removed. The first
 * replicas of a fresh deployment were checked by resolveDeployment a moment ago.
 */
async function profileStillInCatalog(s: DeploymentState): Promise<boolean> {
  if (s.nextSeq === 1 && !s.rebuilt) return true;
  const present = await catalog.profileInCatalog({ model: s.model, profile: s.snapshot.profile });
  s.catalogProblem = present
    ? undefined
    : `profile ${s.snapshot.profile} of model ${s.model} is no longer in the catalog: no replica is started (put it back, or undeploy ${s.name})`;
  return present;
}

/** Failed replicas are replaced at once, then with growing delays if they keep failing. */
function replacementDelayMs(failureTimes: string[]): number {
  if (failureTimes.length < 2) return 0;
  const last = Date.parse(failureTimes[failureTimes.length - 1]!);
  const delay = Math.min(120_000, 5_000 * 2 ** (failureTimes.length - 2));
  return Math.max(0, last + delay - Date.now());
}

function reasonOf(s: DeploymentState): string {
  if (s.catalogProblem) return s.catalogProblem;
  const stuck = Object.values(s.replicas).find((r) => r.phase === 'Unschedulable' || r.phase === 'Failed' || r.phase === 'Unknown');
  return stuck ? `${stuck.replicaId} ${stuck.phase}: ${stuck.reason}` : '';
}

function deploymentDetails(view: DeploymentView): string {
  const lines = [
    `**${view.name}** — **${view.phase}**: ${view.ready}/${view.desired} replicas Ready`,
    '',
    `${view.model} · profile ${view.profile} · served as \`${view.servedName}\``,
    '',
    ...(view.reason ? [view.reason, ''] : []),
    ...(view.rebuilt ? [`Rebuilt: ${view.rebuilt}`, ''] : []),
    '| replica | state | nodes | GPUs | endpoint | reason |',
    '| --- | --- | --- | --- | --- | --- |',
  ];
  for (const r of view.replicas)
    lines.push(
      `| ${r.seq} | ${r.phase} | ${r.nodes.join(', ') || '—'} | ${r.gpus.join(' ') || '—'} | ${r.endpoint || '—'} | ${r.reason.replace(/\|/g, '/')} |`,
    );
  return lines.join('\n');
}
