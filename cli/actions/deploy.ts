// `llmgw deploy`: start a deployment (or change an existing one: its count, a rollout to
// another profile), checked against the catalog before anything starts. Through Temporal (the
// deployModel workflow and its Updates), so it behaves exactly like the Temporal CLI or the Web UI.
import { setTimeout as sleep } from 'node:timers/promises';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import { runUpdate, withClient } from './client.js';
import { catalogToCheck, checkAgainstCatalog } from './catalog-check.js';
import { CliError, failureMessage } from '../errors.js';
import { CONTROL_TASK_QUEUE, deploymentWorkflowId } from '../../common/names.js';
import { DeployModelInputSchema } from '../../workflows/deploy-model/input.js';
import { describeIssues } from '../../workflows/toolkit.js';
import { rolloutUpdate, scaleUpdate } from '../../workflows/definitions.js';
import type { DeployModelInput, DeploymentView } from '../../common/replica-types.js';
import { print, readStatus } from './deployment-view.js';
import { untilRouted } from '../../activities/routes.js';
import { ROUTES_WORKFLOW_ID } from '../../workflows/routes/definitions.js';

function autoscaleFromFlags(opts: DeployOptions): Pick<DeployModelInput, 'autoscale'> {
  if (opts.minReplicas === undefined && opts.maxReplicas === undefined && opts.idleToZero === undefined) return {};
  const min = Number(opts.minReplicas ?? '1');
  return {
    autoscale: {
      min,
      max: Number(opts.maxReplicas ?? String(Math.max(1, min))),
      ...(opts.idleToZero !== undefined ? { idleToZeroSeconds: Number(opts.idleToZero) } : {}),
      ...(opts.autoscaleMetric ? { metric: opts.autoscaleMetric as 'inFlight' } : {}),
      ...(opts.autoscaleTarget !== undefined ? { target: Number(opts.autoscaleTarget) } : {}),
    },
  };
}

export interface DeployOptions {
  minReplicas?: string;
  maxReplicas?: string;
  idleToZero?: string;
  autoscaleMetric?: string;
  autoscaleTarget?: string;
  name?: string;
  replicas?: string;
  rollout?: string;
  maxSurge?: string;
  maxUnavailable?: string;
  profile?: string;
  gpuClass?: string;
  wait?: boolean;
  timeout: string;
  json?: boolean;
  /** The worker's catalog, to check the model in before anything starts; false with --no-catalog. */
  catalog?: string | false;
}

export async function deployCommand(model: string, opts: DeployOptions): Promise<void> {
  const input = deployRequest(model, opts);
  // Before any workflow starts: a deployment of an unknown model or profile would only fail.
  checkAgainstCatalog(catalogToCheck(opts.catalog), model, input);
  const name = input.name ?? model;
  await withClient(async (client) => {
    const handle = await startOrChange(client, name, input, opts.replicas !== undefined);
    const deadline = Date.now() + Number(opts.timeout) * 1000;
    let status: DeploymentView | undefined;
    while (!status && Date.now() < deadline) {
      status = await readStatus(handle);
      if (!status) await sleep(300);
    }
    if (!status) throw new CliError(`${handle.workflowId} did not finish validating in time; see the Web UI`);
    if (opts.wait) status = await untilReady(handle, deadline, opts);
    print(status, opts.json);
  });
}

/** The deployModel input the flags ask for, checked with the workflow's own schema. */
function deployRequest(model: string, opts: DeployOptions): DeployModelInput {
  const autoscale = autoscaleFromFlags(opts);
  const candidate: DeployModelInput = {
    model,
    // An autoscaled deployment starts within its bounds unless a count is given (the workflow's default).
    ...(opts.replicas !== undefined || autoscale.autoscale === undefined ? { replicas: Number(opts.replicas ?? '1') } : {}),
    ...(opts.rollout ? { rollout: opts.rollout as 'auto' | 'manual' } : {}),
    ...(opts.maxSurge !== undefined ? { maxSurge: Number(opts.maxSurge) } : {}),
    ...(opts.maxUnavailable !== undefined ? { maxUnavailable: Number(opts.maxUnavailable) } : {}),
    ...autoscale,
    ...(opts.name ? { name: opts.name } : {}),
    ...(opts.profile ? { profile: opts.profile } : {}),
    ...(opts.gpuClass ? { gpuClass: opts.gpuClass } : {}),
  };
  // The same schema the workflow uses: the CLI says what is wrong before anything starts.
  const parsed = DeployModelInputSchema.safeParse(candidate);
  if (!parsed.success) throw new CliError(`invalid deploy request: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

/**
 * A new deployment starts its workflow. Deploying an existing name: the same model may change
 * its count and roll to another profile; another model under this name is refused rather than
 * scaled.
 */
async function startOrChange(client: Client, name: string, input: DeployModelInput, countGiven: boolean): Promise<WorkflowHandle> {
  const workflowId = deploymentWorkflowId(name);
  try {
    const handle = await client.workflow.start('deployModel', {
      workflowId,
      taskQueue: CONTROL_TASK_QUEUE,
      args: [input],
      staticSummary: `deployment ${name}: ${input.model}${input.profile ? ` (${input.profile})` : ''}`,
    });
    console.error(`started ${workflowId}`);
    return handle;
  } catch (error) {
    if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
  }
  const handle = client.workflow.getHandle(workflowId);
  const current = await readStatus(handle);
  if (current && current.model !== input.model) {
    throw new CliError(
      `deployment ${name} runs model ${current.model}, not ${input.model}: choose another --name, or \`llmgw undeploy ${name}\` first`,
    );
  }
  if (current && input.profile && input.profile !== current.profile) {
    await runUpdate(() => handle.executeUpdate(rolloutUpdate, { args: [{ profile: input.profile }] }));
    console.error(`${workflowId} exists: rolling out profile ${input.profile} (\`llmgw rollout ${name} --wait\` follows it)`);
  }
  if (countGiven) {
    await runUpdate(() => handle.executeUpdate(scaleUpdate, { args: [input.replicas] }));
    console.error(`${workflowId} exists: scaled to ${input.replicas}`);
  }
  return handle;
}

/** `--wait`: each replica's progress until all are Ready and routed, one fails, or the deadline. */
async function untilReady(handle: WorkflowHandle, deadline: number, opts: DeployOptions): Promise<DeploymentView> {
  let lastLines = '';
  for (;;) {
    const status = await readStatus(handle);
    if (!status) continue;
    const lines = status.replicas.map((r) => `  ${r.replicaId.padEnd(24)} ${r.phase.padEnd(13)} ${r.reason}`).join('\n');
    if (lines !== lastLines && !opts.json)
      console.error(
        `${new Date().toISOString().slice(11, 19)} ${status.name}: ${status.phase} (${status.ready}/${status.desired} Ready)\n${lines}`,
      );
    lastLines = lines;
    if (status.phase === 'Ready') {
      await untilRoutersRoute(handle.client, status, deadline, opts.json);
      return status;
    }
    const failed = status.replicas.find((r) => r.phase === 'Failed');
    if (failed) throw new CliError(`${failed.replicaId} failed: ${failed.reason}`);
    if (Date.now() > deadline) throw new CliError(`not Ready after ${opts.timeout} s: ${status.reason || status.phase}`);
    await sleep(500);
  }
}

/**
 * `deploy --wait` returns when a request through any router will be served: every Ready replica
 * is in the table of every live router (the routes workflow's awaitRouted, as rollouts count a
 * replica), not only Ready in Temporal.
 */
async function untilRoutersRoute(
  client: WorkflowHandle['client'],
  status: DeploymentView,
  deadline: number,
  json: boolean | undefined,
): Promise<void> {
  const routes = client.getHandle(ROUTES_WORKFLOW_ID);
  let routers = 0;
  for (const replica of status.replicas.filter((r) => r.phase === 'Ready')) {
    const left = deadline - Date.now();
    if (left <= 0) throw new CliError(`Ready, but the routers did not route to ${replica.replicaId} in time`);
    try {
      // Unreferenced: a wait that is not over must not keep the command from exiting.
      const result = await Promise.race([
        untilRouted(
          routes,
          replica.replicaId,
          true,
          (ms) => sleep(ms),
          (reason) => {
            if (!json) console.error(`asking the routes workflow again (${reason})`);
          },
        ),
        sleep(left, undefined, { ref: false }).then(() => undefined),
      ]);
      if (!result) throw new CliError(`Ready, but the routers did not route to ${replica.replicaId} in time (\`llmgw status\` shows it)`);
      routers = result.routers;
    } catch (error) {
      if (error instanceof CliError) throw error;
      if (error instanceof WorkflowNotFoundError) {
        if (!json) console.error('the routes workflow is not running (is a control worker up?): not waiting for routers');
        return;
      }
      throw new CliError(`waiting for the routers to route ${replica.replicaId}: ${failureMessage(error)}`);
    }
  }
  if (!json) console.error(routers ? `routed by ${routers} router(s)` : 'no router is running: nothing to wait for');
}
