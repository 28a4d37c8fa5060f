// The `deployModel` workflow (deployment/<name>): the controller of one deployment. It checks
// the request against the catalog, keeps the desired number of `replica` children (sequence
// numbers never reused, even across undeploy and deploy of one name), replaces failed ones
// with backoff, scales, and drains everything on undeploy. Every handler is registered before
// the first await, so a `scale` sent a moment after the start is accepted and applied once the
// deployment is resolved. State: state.ts; continue-as-new in one place (handOver).
import { ApplicationFailure, allHandlersFinished, condition, getExternalWorkflowHandle, log, workflowInfo } from '@temporalio/workflow';
import { FailureType } from '../../common/failures.js';
import type { DeployModelInput, DeploymentView } from '../../common/replica-types.js';
import { revisionOfSnapshot } from '../../common/revision.js';
import { stopReplicaSignal } from '../definitions.js';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { describeIssues, handOverDue as handOverDueFor } from '../toolkit.js';
import { control, startReplica } from './calls.js';
import { createDeploymentContext, registerDeploymentHandlers } from './handlers.js';
import { DEPLOYMENT_NAME, DeployModelInputSchema } from './input.js';
import { createDeploymentPublisher } from './publish.js';
import { closeReason, profileStillInCatalog, resolveDeployment } from './resolve.js';
import { isActive } from './rollout.js';
import { confirmRouted, driveRollout, resolveTarget, startRollout } from './rollout-steps.js';
import { activeReplicas, deploymentView, drainVictims, pruneFinished, replacementDelayMs, type DeploymentState } from './state.js';

const HISTORY_LIMIT = 5_000;

export async function deployModel(rawInput: DeployModelInput): Promise<DeploymentView> {
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

  const ctx = createDeploymentContext(input, name, input.carried as DeploymentState | undefined);
  registerDeploymentHandlers(ctx);
  const upgrade = watchUpgrades();
  await upgrade.park(input.upgrading);

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
  const deployment: DeploymentState = ctx.state;

  const publish = createDeploymentPublisher(deployment);
  const handOverDue = handOverDueFor(upgrade, input.continueAsNewAfterEvents ?? HISTORY_LIMIT);

  const routedAsked: Record<string, boolean> = {};
  const prefetches: Record<string, boolean> = {};
  for (;;) {
    ctx.dirty = false;
    pruneFinished(deployment, Date.now());
    const serving = activeReplicas(deployment).filter((r) => !r.stopping);
    let waitMs: number | undefined;
    if (
      ctx.autoRolloutWanted &&
      !isActive(deployment.rollout) &&
      !deployment.undeploying &&
      deployment.catalogRevision !== revisionOfSnapshot(deployment.snapshot)
    ) {
      ctx.autoRolloutWanted = false;
      const target = await resolveTarget(deployment, undefined).catch((error: unknown) => {
        log.warn(`automatic rollout of ${deployment.name} not started: ${String(error)}`);
        return undefined;
      });
      if (target) startRollout(deployment, target, {}, new Date().toISOString(), 'catalog edit (rollout: auto)');
    }
    if (deployment.rollout?.state === 'Paused' && !deployment.undeploying) {
      // Held where it is until resumed or undone: neither the rollout nor the count moves.
    } else if (isActive(deployment.rollout) && !deployment.undeploying) {
      const before = `${deployment.rollout?.state}/${deployment.rollout?.mode}/${deployment.rollout?.startedAt}`;
      await driveRollout(deployment, new Date().toISOString(), {
        continueAsNewAfterEvents: input.continueAsNewAfterEvents,
        markClosed: ctx.markClosed,
        prefetches,
        wake: () => void (ctx.dirty = true),
      });
      // A rollback or a change of mode is planned again at once, not at the next report.
      if (`${deployment.rollout?.state}/${deployment.rollout?.mode}/${deployment.rollout?.startedAt}` !== before) ctx.dirty = true;
      confirmRouted(deployment, routedAsked, () => void (ctx.dirty = true));
      // Waiting replicas give up after a while: look again then even if nothing reports.
      if (deployment.rollout?.waitingSince) waitMs = 30_000;
    } else if (serving.length < deployment.desired) {
      const delay = replacementDelayMs(deployment.failureTimes, Date.now());
      if (delay > 0) {
        waitMs = delay;
        log.info(
          `replacing failed replicas in ${Math.round(delay / 1000)} s (${deployment.failureTimes.length} failures in the last 10 min)`,
        );
      } else if (await profileStillInCatalog(deployment)) {
        for (let i = serving.length; i < deployment.desired; i++) {
          const child = await startReplica(deployment, input.continueAsNewAfterEvents);
          // A replica that ends without its final report (terminated, timed out) is noticed here.
          void child.handle.result().then(
            () => ctx.markClosed(child.replicaId, 'its workflow completed without a final report'),
            (error: unknown) => ctx.markClosed(child.replicaId, `its workflow ended: ${closeReason(error)}`),
          );
        }
      } else {
        waitMs = 60_000;
      }
    } else if (serving.length > deployment.desired) {
      for (const victim of drainVictims(serving, deployment.desired)) {
        victim.stopping = true;
        await getExternalWorkflowHandle(victim.replicaId)
          .signal(stopReplicaSignal, { reason: deployment.undeploying ? 'undeploy' : `scaled to ${deployment.desired}` })
          .catch(() => undefined);
      }
    }
    publish();
    if (deployment.undeploying && !activeReplicas(deployment).length) break;
    if (handOverDue() && !ctx.dirty) {
      await condition(allHandlersFinished);
      const upgrading = upgrade.requested();
      await continueAsNewWith<typeof deployModel>(upgrading)({ ...input, carried: deployment, upgrading });
    }
    await condition(() => ctx.dirty || handOverDue(), waitMs);
  }
  await condition(allHandlersFinished);
  return deploymentView(deployment);
}
