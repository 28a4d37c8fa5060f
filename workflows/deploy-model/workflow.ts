// The `deployModel` workflow (deployment/<name>): the controller of one deployment. It checks
// the request against the catalog, keeps the desired number of `replica` children (sequence
// numbers never reused, even across undeploy and deploy of one name), replaces failed ones
// with backoff, scales, and drains everything on undeploy. Every handler is registered before
// the first await, so a `scale` sent a moment after the start is accepted and applied once the
// deployment is resolved. Checks: resolve.ts; handlers: handlers.ts; one pass of the loop, a
// table of moves: steps.ts; state: state.ts; continue-as-new in one place (below).
import { allHandlersFinished, condition } from '@temporalio/workflow';
import type { DeployModelInput, DeploymentView } from '../../common/replica-types.js';
import { continueAsNewWith, watchUpgrades } from '../upgrade.js';
import { refusedCarried, sealForNextRun } from '../carried.js';
import { signalsInFlight } from '../signals-in-flight.js';
import { handOverDue as handOverDueFor } from '../toolkit.js';
import { createDeploymentContext, registerDeploymentHandlers } from './handlers.js';
import { createDeploymentPublisher } from './publish.js';
import { checkDeployModelInput, resolveOrResume } from './resolve.js';
import { runPass } from './steps.js';
import { activeReplicas, deploymentView, type DeploymentState } from './state.js';

const HISTORY_LIMIT = 5_000;

export async function deployModel(rawInput: DeployModelInput): Promise<DeploymentView> {
  const { input, name } = checkDeployModelInput(rawInput);
  // Carried state is taken only once its seal verifies (after the park, which every build issues
  // alike); until then the handlers wait as they do for a fresh run's catalog check. A refused
  // one starts from nothing: the input is checked against the catalog as a new deployment's is.
  const ctx = createDeploymentContext(input, name, undefined);
  registerDeploymentHandlers(ctx);
  const upgrade = watchUpgrades();
  await upgrade.park(input.upgrading);
  if (input.carried !== undefined && (await refusedCarried(rawInput)) === undefined) ctx.state = input.carried as DeploymentState;
  const deployment = await resolveOrResume(ctx, input, name);

  // What the routes workflow was told goes out before this run ends or hands over (routes/notify.ts).
  const routesInFlight = signalsInFlight();
  const publish = createDeploymentPublisher(deployment, routesInFlight);
  const handOverDue = handOverDueFor(upgrade, input.continueAsNewAfterEvents ?? HISTORY_LIMIT);
  const records = { routedAsked: {}, prefetches: {} };
  for (;;) {
    ctx.dirty = false;
    const waitMs = await runPass(ctx, deployment, records);
    publish();
    if (deployment.undeploying && !activeReplicas(deployment).length) break;
    if (handOverDue() && !ctx.dirty) {
      await condition(allHandlersFinished);
      const next = await sealForNextRun(() => ({ ...input, carried: deployment, upgrading: upgrade.requested() }), routesInFlight.allSent);
      await continueAsNewWith<typeof deployModel>(next.upgrading)(next);
    }
    await condition(() => ctx.dirty || handOverDue(), waitMs);
  }
  await condition(() => allHandlersFinished() && routesInFlight.allSent());
  return deploymentView(deployment);
}
