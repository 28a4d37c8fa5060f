// Checking a deployment: its input and workflow id, then against the catalog and the fleet —
// the first resolution (profile, limits, the first sequence number no earlier incarnation
// used) or, in a continued run, which carried replicas still run — and the check before each
// replacement that its profile is still in the catalog. Workflow side.
import { ActivityFailure, allHandlersFinished, ApplicationFailure, condition, workflowInfo } from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import type { DeployModelInput } from '../../common/replica-types.js';
import { describeIssues } from '../toolkit.js';
import { catalog, control } from './calls.js';
import type { DeploymentContext } from './handlers.js';
import { DEPLOYMENT_NAME, DeployModelInputSchema } from './input.js';
import { activeReplicas, DEFAULT_POLICY, type DeploymentState } from './state.js';

/** The input parsed, and the deployment's name, which must match the workflow id; refusals are final. */
export function checkDeployModelInput(rawInput: DeployModelInput): { input: CheckedInput; name: string } {
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
  return { input, name };
}

type CheckedInput = ReturnType<(typeof DeployModelInputSchema)['parse']>;

/**
 * A fresh run resolves the deployment (a refusal fails the run once its handlers are done); a
 * continued one checks its carried replicas instead.
 */
export async function resolveOrResume(ctx: DeploymentContext, input: CheckedInput, name: string): Promise<DeploymentState> {
  if (!ctx.state) {
    try {
      ctx.state = await resolveDeployment(input, name);
    } catch (error) {
      ctx.failed = error instanceof ApplicationFailure ? error.message : String(error);
      await condition(allHandlersFinished);
      throw error;
    }
  } else {
    // Replicas carried from the previous run: any that ended meanwhile without a word is
    // noticed now (those this run starts are watched through their child handles).
    const open = activeReplicas(ctx.state).map((r) => r.replicaId);
    if (open.length) {
      const running = await control('runningReplicas: which carried replicas still run').runningReplicas({ replicaIds: open });
      for (const id of open) if (!running.includes(id)) ctx.markClosed(id, 'its workflow ended while the deployment continued as new');
    }
  }
  return ctx.state;
}

/** The catalog check and the first free sequence number; a refusal names the problem and the valid choices. */
export async function resolveDeployment(input: CheckedInput, name: string): Promise<DeploymentState> {
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
  const autoscale = input.autoscale ?? resolved.autoscale;
  // An autoscaled deployment starts within its bounds, with one replica at least (a deployment
  // at zero is Idle until a request wakes it).
  const replicas = input.replicas ?? (autoscale ? Math.min(autoscale.max, Math.max(1, autoscale.min)) : 1);
  const limit = Math.max(resolved.maxReplicas, 0);
  if (replicas > limit || (autoscale && autoscale.max > limit)) {
    throw ApplicationFailure.nonRetryable(
      `${autoscale && autoscale.max > limit ? `autoscale.max ${autoscale.max}` : `replicas ${replicas}`} is over the maximum of ${limit} (catalog defaults.maxReplicas)`,
      FailureType.InvalidInput,
    );
  }
  if (autoscale && (replicas < autoscale.min || replicas > autoscale.max)) {
    throw ApplicationFailure.nonRetryable(
      `replicas ${replicas} is outside autoscale bounds ${autoscale.min}–${autoscale.max}`,
      FailureType.InvalidInput,
    );
  }
  const nextSeq = await control(`nextReplicaSeq: the first sequence number no earlier ${name} used`).nextReplicaSeq({ deployment: name });
  return {
    name,
    model: input.model,
    snapshot: resolved.snapshot,
    desired: replicas,
    ...(autoscale ? { autoscale } : {}),
    maxReplicas: resolved.maxReplicas,
    drainGraceSeconds: resolved.drainGraceSeconds,
    drainTimeoutSeconds: resolved.drainTimeoutSeconds,
    policy: {
      maxSurge: input.maxSurge ?? (input.maxUnavailable ? 0 : DEFAULT_POLICY.maxSurge),
      maxUnavailable: input.maxUnavailable ?? DEFAULT_POLICY.maxUnavailable,
      auto: input.rollout === 'auto',
    },
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
export async function profileStillInCatalog(deployment: DeploymentState): Promise<boolean> {
  if (!Object.keys(deployment.replicas).length && !deployment.rebuilt && !deployment.failureTimes.length) return true;
  const present = await catalog.profileInCatalog({ model: deployment.model, profile: deployment.snapshot.profile });
  deployment.catalogProblem = present
    ? undefined
    : `profile ${deployment.snapshot.profile} of model ${deployment.model} is no longer in the catalog: no replica is started (put it back, or undeploy ${deployment.name})`;
  return present;
}

export function closeReason(error: unknown): string {
  const cause = (error as { cause?: unknown })?.cause ?? error;
  const text = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  return /terminat/i.test(text) ? 'terminated' : /timeout|timed out/i.test(text) ? 'timed out' : text;
}
