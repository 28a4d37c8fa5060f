// `llmgw scale | undeploy`: change a deployment's count or autoscaling bounds, or drain it
// away. Through the deployModel workflow's Updates. Operator side.
import { WorkflowNotFoundError } from '@temporalio/client';
import { withClient } from './client.js';
import { CliError, failureMessage } from '../errors.js';
import { deploymentWorkflowId } from '../../common/names.js';
import { AutoscaleSchema } from '../../common/autoscale.js';
import { describeIssues } from '../../workflows/toolkit.js';
import { deploymentStatusQuery, scaleUpdate, setAutoscaleUpdate, undeployUpdate } from '../../workflows/definitions.js';
import type { DeploymentView } from '../../common/replica-types.js';
import { print } from './deployment-view.js';

export interface ScaleOptions {
  min?: string;
  max?: string;
  idleToZero?: string;
  /** false with --no-autoscale */
  autoscale?: boolean;
  json?: boolean;
}

export async function scaleCommand(name: string, replicas: string | undefined, opts: ScaleOptions): Promise<void> {
  const bounds = opts.min !== undefined || opts.max !== undefined;
  if (replicas === undefined && !bounds && opts.autoscale !== false)
    throw new CliError('give a replica count, or --min/--max for an autoscaled deployment');
  if (replicas !== undefined && bounds) throw new CliError('give either a replica count or --min/--max, not both');
  const count = Number(replicas);
  if (replicas !== undefined && (!Number.isInteger(count) || count < 0))
    throw new CliError(`replicas must be a whole number ≥ 0, got ${replicas}`);
  await withClient(async (client) => {
    const handle = client.workflow.getHandle(deploymentWorkflowId(name));
    try {
      let view: DeploymentView;
      if (opts.autoscale === false) {
        view = await handle.executeUpdate(setAutoscaleUpdate, { args: [null] });
        if (replicas !== undefined) view = await handle.executeUpdate(scaleUpdate, { args: [count] });
      } else if (bounds) {
        const current = (await handle.query(deploymentStatusQuery)).autoscale;
        const settings = {
          min: opts.min !== undefined ? Number(opts.min) : (current?.min ?? 1),
          max: opts.max !== undefined ? Number(opts.max) : (current?.max ?? Number(opts.min)),
          ...(opts.idleToZero !== undefined
            ? { idleToZeroSeconds: Number(opts.idleToZero) }
            : current?.idleToZeroSeconds
              ? { idleToZeroSeconds: current.idleToZeroSeconds }
              : {}),
        };
        const parsed = AutoscaleSchema.safeParse(settings);
        if (!parsed.success) throw new CliError(`invalid autoscale bounds: ${describeIssues(parsed.error)}`);
        view = await handle.executeUpdate(setAutoscaleUpdate, { args: [parsed.data] });
      } else {
        view = await handle.executeUpdate(scaleUpdate, { args: [count] });
      }
      print(view, opts.json);
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name} (\`llmgw status\` lists them)`);
      throw new CliError(failureMessage(error));
    }
  });
}

export async function undeployCommand(name: string, opts: { wait: boolean; json?: boolean }): Promise<void> {
  await withClient(async (client) => {
    const handle = client.workflow.getHandle(deploymentWorkflowId(name));
    try {
      await handle.executeUpdate(undeployUpdate);
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name} (\`llmgw status\` lists them)`);
      throw new CliError(failureMessage(error));
    }
    console.error(`undeploying ${name}: draining every replica`);
    if (!opts.wait) return;
    const final = (await handle.result()) as DeploymentView;
    print(final, opts.json);
  });
}
