// The `deployModel` workflow (deployment/<name>): the controller of one deployment. It checks
// the request against the catalog, keeps the desired number of `replica` children (sequence
// numbers never reused, even across undeploy and deploy of one name), replaces failed ones
// with backoff, scales, and drains everything on undeploy. Every handler is registered before
// the first await, so a `scale` sent a moment after the start is accepted and applied once the
// deployment is resolved. State: state.ts; continue-as-new in one place (handOver).
import {
  ActivityFailure,
  ApplicationFailure,
  allHandlersFinished,
  condition,
  getExternalWorkflowHandle,
  log,
  patched,
  setCurrentDetails,
  setHandler,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import { SA } from '../../common/search-attributes.js';
import type { DeployModelInput, DeploymentView } from '../../common/replica-types.js';
import {
  adoptReplicaSignal,
  deploymentStatusQuery,
  replicaClosedSignal,
  replicaStatusSignal,
  scaleUpdate,
  stopReplicaSignal,
  undeployUpdate,
} from '../definitions.js';
import { deployModelV0 } from '../legacy/deploy-model-v0.js';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { VERSIONED_RELEASE } from '../versions.js';
import { catalog, control, startReplica } from './calls.js';
import { DEPLOYMENT_NAME, DeployModelInputSchema, describeIssues } from './input.js';
import {
  activeReplicas,
  deploymentDetails,
  deploymentPhase,
  deploymentView,
  drainVictims,
  isTerminal,
  pruneFinished,
  replacementDelayMs,
  type DeploymentState,
} from './state.js';

const HISTORY_LIMIT = 5_000;

export async function deployModel(rawInput: DeployModelInput): Promise<DeploymentView> {
  if (!patched(VERSIONED_RELEASE)) return deployModelV0(rawInput);
  const parsed = DeployModelInputSchema.safeParse(rawInput);
  if (!parsed.success)
    throw ApplicationFailure.nonRetryable(`invalid deployModel input: ${describeIssues(parsed.error)}`, FailureType.InvalidInput);
  const input = parsed.data;
  const info = workflowInfo();
  const name = input.name ?? info.workflowId.replace(/^deployment\//, '');
  if (!DEPLOYMENT_NAME.test(name)) {
    throw ApplicationFailure.nonRetryable(
      `deployment name "${name}" is not valid: lowercase letters, digits, ".", "_" or "-"`,
      FailureType.InvalidInput,
    );
  }
  if (info.workflowId !== `deployment/${name}`) {
    throw ApplicationFailure.nonRetryable(
      `a deployment named "${name}" must run as workflow id deployment/${name}, not ${info.workflowId}`,
      FailureType.InvalidInput,
    );
  }
  // Carried state skips the catalog check: only a run continued from ours may bring it.
  if (input.carried !== undefined && !info.continuedFromExecutionRunId) {
    throw ApplicationFailure.nonRetryable(
      'invalid deployModel input: carried is internal state of a continued run; leave it out',
      FailureType.InvalidInput,
    );
  }

  let s = input.carried as DeploymentState | undefined;
  let failed: string | undefined;
  let dirty = true;
  const resolved = (): Promise<DeploymentState> =>
    condition(() => s !== undefined || failed !== undefined).then(() => {
      if (!s) throw ApplicationFailure.nonRetryable(failed ?? 'the deployment was not resolved', FailureType.InvalidInput);
      return s;
    });

  // Every handler first. Until the catalog check is done, signals and updates wait for it.
  setHandler(deploymentStatusQuery, (): DeploymentView =>
    s
      ? deploymentView(s)
      : {
          name,
          model: input.model,
          profile: input.profile ?? '',
          servedName: '',
          phase: failed ? 'Failed' : 'Validating',
          desired: input.replicas,
          ready: 0,
          replicas: [],
          reason: failed ?? 'checking the request against the catalog and the fleet',
        },
  );
  // Before replicaStatus: a rebuilt replica must be known before it reports.
  setHandler(adoptReplicaSignal, async ({ replicaId, seq, reason }) => {
    const d = await resolved().catch(() => undefined);
    if (!d || d.replicas[replicaId]) return;
    log.info(`adopting ${replicaId}: ${reason}`);
    const since = new Date().toISOString();
    d.replicas[replicaId] = {
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
      since,
      stopping: false,
    };
    d.nextSeq = Math.max(d.nextSeq, seq + 1);
    // A rebuilt deployment wants what was found running; a live one keeps its own count
    // (and drains the extra replica if it has too many).
    if (d.rebuilt && !d.undeploying) d.desired = Math.min(d.maxReplicas, Math.max(d.desired, activeReplicas(d).length));
    dirty = true;
  });
  setHandler(replicaStatusSignal, async (replicaView) => {
    const d = await resolved().catch(() => undefined);
    const previous = d?.replicas[replicaView.replicaId];
    if (!d || !previous) return; // a replica of an older deployment with this name
    d.replicas[replicaView.replicaId] = { ...replicaView, stopping: previous.stopping };
    if (replicaView.phase === 'Failed' && previous.phase !== 'Failed') d.failureTimes.push(new Date().toISOString());
    dirty = true;
  });
  const markClosed = (replicaId: string, reason: string): void => {
    const previous = s?.replicas[replicaId];
    if (!s || !previous || isTerminal(previous)) return;
    log.warn(`${replicaId} ended without reporting: ${reason}`);
    // Failed, to be seen and replaced, but not counted towards the crash-loop backoff: the
    // workflow was ended from outside, its engine did not fail.
    s.replicas[replicaId] = { ...previous, phase: 'Failed', reason, since: new Date().toISOString() };
    dirty = true;
  };
  setHandler(replicaClosedSignal, async ({ replicaId, reason }) => {
    await resolved().catch(() => undefined);
    markClosed(replicaId, reason);
  });
  setHandler(
    scaleUpdate,
    async (replicas) => {
      const d = await resolved();
      if (replicas > d.maxReplicas)
        throw ApplicationFailure.nonRetryable(`replicas must be at most ${d.maxReplicas} (catalog defaults.maxReplicas), got ${replicas}`);
      if (d.undeploying) throw ApplicationFailure.nonRetryable(`deployment ${d.name} is being undeployed`);
      d.desired = replicas;
      dirty = true;
      return deploymentView(d);
    },
    {
      validator: (replicas) => {
        if (!Number.isInteger(replicas) || replicas < 0) throw new Error(`replicas must be a whole number ≥ 0, got ${replicas}`);
        if (s && replicas > s.maxReplicas) throw new Error(`replicas must be a whole number from 0 to ${s.maxReplicas}, got ${replicas}`);
        if (s?.undeploying) throw new Error(`deployment ${s.name} is being undeployed`);
        if (failed) throw new Error(failed);
      },
    },
  );
  setHandler(undeployUpdate, async () => {
    const d = await resolved();
    d.undeploying = true;
    d.desired = 0;
    dirty = true;
    return deploymentView(d);
  });
  const upgrade = watchUpgrades();
  await upgrade.park(input.upgrading);

  if (!s) {
    try {
      s = await resolveDeployment(input, name);
    } catch (error) {
      failed = error instanceof ApplicationFailure ? error.message : String(error);
      await condition(allHandlersFinished);
      throw error;
    }
  } else {
    // Replicas carried from the previous run: any that ended meanwhile without a word is
    // noticed now (those this run starts are watched through their child handles).
    const open = activeReplicas(s).map((r) => r.replicaId);
    if (open.length) {
      const running = await control('runningReplicas: which carried replicas still run').runningReplicas({ replicaIds: open });
      for (const id of open) if (!running.includes(id)) markClosed(id, 'its workflow ended while the deployment continued as new');
    }
  }
  const d: DeploymentState = s;

  let published = '';
  const publish = (): void => {
    const view = deploymentView(d);
    const key = JSON.stringify([
      view.phase,
      d.desired,
      view.ready,
      view.reason,
      d.snapshot.profile,
      view.replicas.map((r) => [r.replicaId, r.phase, r.reason]),
    ]);
    if (key === published) return;
    published = key;
    upsertSearchAttributes([
      { key: SA.deployment, value: d.name },
      { key: SA.model, value: d.model },
      { key: SA.state, value: deploymentPhase(d) },
      { key: SA.gpuClass, value: d.snapshot.gpuClass },
    ]);
    upsertMemo({
      deployment: {
        name: d.name,
        model: d.model,
        profile: d.snapshot.profile,
        desired: d.desired,
        nextSeq: d.nextSeq,
        ...(d.rebuilt ? { rebuilt: d.rebuilt } : {}),
      },
    });
    setCurrentDetails(deploymentDetails(view));
  };
  const historyLimit = input.continueAsNewAfterEvents ?? HISTORY_LIMIT;
  const handOverDue = (): boolean =>
    upgrade.requested() || workflowInfo().continueAsNewSuggested || workflowInfo().historyLength > historyLimit;

  for (;;) {
    dirty = false;
    pruneFinished(d, Date.now());
    const serving = activeReplicas(d).filter((r) => !r.stopping);
    let waitMs: number | undefined;
    if (serving.length < d.desired) {
      const delay = replacementDelayMs(d.failureTimes, Date.now());
      if (delay > 0) {
        waitMs = delay;
        log.info(`replacing failed replicas in ${Math.round(delay / 1000)} s (${d.failureTimes.length} failures in the last 10 min)`);
      } else if (await profileStillInCatalog(d)) {
        for (let i = serving.length; i < d.desired; i++) {
          const child = await startReplica(d, input.continueAsNewAfterEvents);
          // A replica that ends without its final report (terminated, timed out) is noticed here.
          void child.handle.result().then(
            () => markClosed(child.replicaId, 'its workflow completed without a final report'),
            (error: unknown) => markClosed(child.replicaId, `its workflow ended: ${closeReason(error)}`),
          );
        }
      } else {
        waitMs = 60_000;
      }
    } else if (serving.length > d.desired) {
      for (const victim of drainVictims(serving, d.desired)) {
        victim.stopping = true;
        await getExternalWorkflowHandle(victim.replicaId)
          .signal(stopReplicaSignal, { reason: d.undeploying ? 'undeploy' : `scaled to ${d.desired}` })
          .catch(() => undefined);
      }
    }
    publish();
    if (d.undeploying && !activeReplicas(d).length) break;
    if (handOverDue() && !dirty) {
      await condition(allHandlersFinished);
      const upgrading = upgrade.requested();
      await continueAsNewWith<typeof deployModel>(upgrading)({ ...input, carried: d, upgrading });
    }
    await condition(() => dirty || handOverDue(), waitMs);
  }
  await condition(allHandlersFinished);
  return deploymentView(d);
}

/** The catalog check and the first free sequence number; a refusal names the problem and the valid choices. */
async function resolveDeployment(input: ReturnType<typeof DeployModelInputSchema.parse>, name: string): Promise<DeploymentState> {
  let resolved: Awaited<ReturnType<ReturnType<typeof control>['resolveDeployment']>>;
  try {
    resolved = await control('resolveDeployment: check the request against the catalog and the fleet').resolveDeployment({
      model: input.model,
      profile: input.profile,
      gpuClass: input.gpuClass,
    });
  } catch (error) {
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
  const nextSeq = await control(`nextReplicaSeq: the first sequence number no earlier ${name} used`).nextReplicaSeq({ deployment: name });
  return {
    name,
    model: input.model,
    snapshot: resolved.snapshot,
    desired: input.replicas,
    maxReplicas: resolved.maxReplicas,
    drainGraceSeconds: resolved.drainGraceSeconds,
    nextSeq,
    replicas: {},
    failureTimes: [],
    undeploying: false,
    labels: input.labels ?? {},
    ...(input.rebuilt ? { rebuilt: input.rebuilt.reason } : {}),
  };
}

/**
 * A replacement or scale-up runs the deployment's snapshot; if its profile has left the
 * catalog since, starting it would bring back what the operator removed. The first
 * replicas of a fresh deployment were checked by resolveDeployment a moment ago.
 */
async function profileStillInCatalog(d: DeploymentState): Promise<boolean> {
  if (!Object.keys(d.replicas).length && !d.rebuilt && !d.failureTimes.length) return true;
  const present = await catalog.profileInCatalog({ model: d.model, profile: d.snapshot.profile });
  d.catalogProblem = present
    ? undefined
    : `profile ${d.snapshot.profile} of model ${d.model} is no longer in the catalog: no replica is started (put it back, or undeploy ${d.name})`;
  return present;
}

function closeReason(error: unknown): string {
  const cause = (error as { cause?: unknown })?.cause ?? error;
  const text = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  return /terminat/i.test(text) ? 'terminated' : /timeout|timed out/i.test(text) ? 'timed out' : text;
}
