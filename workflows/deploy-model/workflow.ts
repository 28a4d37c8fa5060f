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
import { createDeploymentRun, registerDeploymentHandlers } from './handlers.js';
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

  const run = createDeploymentRun(input, name, input.carried as DeploymentState | undefined);
  registerDeploymentHandlers(run);
  const upgrade = watchUpgrades();
  await upgrade.park(input.upgrading);

  if (!run.s) {
    try {
      run.s = await resolveDeployment(input, name);
    } catch (error) {
      run.failed = error instanceof ApplicationFailure ? error.message : String(error);
      await condition(allHandlersFinished);
      throw error;
    }
  } else {
    // Replicas carried from the previous run: any that ended meanwhile without a word is
    // noticed now (those this run starts are watched through their child handles).
    const open = activeReplicas(run.s).map((r) => r.replicaId);
    if (open.length) {
      const running = await control('runningReplicas: which carried replicas still run').runningReplicas({ replicaIds: open });
      for (const id of open) if (!running.includes(id)) run.markClosed(id, 'its workflow ended while the deployment continued as new');
    }
  }
  const d: DeploymentState = run.s;

  const publish = createDeploymentPublisher(d);
  const handOverDue = handOverDueFor(upgrade, input.continueAsNewAfterEvents ?? HISTORY_LIMIT);

  const routedAsked: Record<string, boolean> = {};
  const prefetches: Record<string, boolean> = {};
  for (;;) {
    run.dirty = false;
    pruneFinished(d, Date.now());
    const serving = activeReplicas(d).filter((r) => !r.stopping);
    let waitMs: number | undefined;
    if (run.autoRolloutWanted && !isActive(d.rollout) && !d.undeploying && d.catalogRevision !== revisionOfSnapshot(d.snapshot)) {
      run.autoRolloutWanted = false;
      const target = await resolveTarget(d, undefined).catch((error: unknown) => {
        log.warn(`automatic rollout of ${d.name} not started: ${String(error)}`);
        return undefined;
      });
      if (target) startRollout(d, target, {}, new Date().toISOString(), 'catalog edit (rollout: auto)');
    }
    if (d.rollout?.state === 'Paused' && !d.undeploying) {
      // Held where it is until resumed or undone: neither the rollout nor the count moves.
    } else if (isActive(d.rollout) && !d.undeploying) {
      const before = `${d.rollout?.state}/${d.rollout?.mode}/${d.rollout?.startedAt}`;
      await driveRollout(d, new Date().toISOString(), {
        continueAsNewAfterEvents: input.continueAsNewAfterEvents,
        markClosed: run.markClosed,
        prefetches,
        wake: () => void (run.dirty = true),
      });
      // A rollback or a change of mode is planned again at once, not at the next report.
      if (`${d.rollout?.state}/${d.rollout?.mode}/${d.rollout?.startedAt}` !== before) run.dirty = true;
      confirmRouted(d, routedAsked, () => void (run.dirty = true));
      // Waiting replicas give up after a while: look again then even if nothing reports.
      if (d.rollout?.waitingSince) waitMs = 30_000;
    } else if (serving.length < d.desired) {
      const delay = replacementDelayMs(d.failureTimes, Date.now());
      if (delay > 0) {
        waitMs = delay;
        log.info(`replacing failed replicas in ${Math.round(delay / 1000)} s (${d.failureTimes.length} failures in the last 10 min)`);
      } else if (await profileStillInCatalog(d)) {
        for (let i = serving.length; i < d.desired; i++) {
          const child = await startReplica(d, input.continueAsNewAfterEvents);
          // A replica that ends without its final report (terminated, timed out) is noticed here.
          void child.handle.result().then(
            () => run.markClosed(child.replicaId, 'its workflow completed without a final report'),
            (error: unknown) => run.markClosed(child.replicaId, `its workflow ended: ${closeReason(error)}`),
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
    if (handOverDue() && !run.dirty) {
      await condition(allHandlersFinished);
      const upgrading = upgrade.requested();
      await continueAsNewWith<typeof deployModel>(upgrading)({ ...input, carried: d, upgrading });
    }
    await condition(() => run.dirty || handOverDue(), waitMs);
  }
  await condition(allHandlersFinished);
  return deploymentView(d);
}
