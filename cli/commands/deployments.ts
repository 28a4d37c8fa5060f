// `llmgw deploy | status | scale | undeploy | logs`: the operator's commands, all
// through Temporal (the deployModel workflow's Updates and queries), so they behave
// exactly like a deployment started from the Temporal CLI or the Web UI.
import { newTable } from './table.js';
import { WorkflowExecutionAlreadyStartedError, WorkflowFailedError, WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import { CliError, withClient } from './client.js';
import { CONTROL_TASK_QUEUE, deploymentWorkflowId } from '../../common/names.js';
import { DeployModelInputSchema, describeIssues } from '../../workflows/deploy-model/input.js';
import { deploymentStatusQuery, describeNodeQuery, replicaStatusQuery, scaleUpdate, undeployUpdate } from '../../workflows/definitions.js';
import type { DeployModelInput, DeploymentView, ReplicaView } from '../../common/replica-types.js';
import { connectAdmin } from '../../agent/admin/client.js';

/** The deployment's status, or the reason its workflow failed, or undefined while it validates. */
async function readStatus(handle: WorkflowHandle): Promise<DeploymentView | undefined> {
  const description = await handle.describe();
  if (description.status.name === 'FAILED') {
    try {
      await handle.result();
    } catch (error) {
      throw new CliError(failureMessage(error));
    }
  }
  if (description.status.name !== 'RUNNING' && description.status.name !== 'COMPLETED')
    throw new CliError(`deployment workflow ${handle.workflowId} is ${description.status.name}`);
  try {
    const view = await handle.query(deploymentStatusQuery);
    return view.phase === 'Validating' ? undefined : view;
  } catch {
    return undefined; // the first workflow task has not run yet
  }
}

function failureMessage(error: unknown): string {
  if (error instanceof WorkflowFailedError) return error.cause?.message ?? error.message;
  return error instanceof Error ? error.message : String(error);
}

export interface DeployOptions {
  name?: string;
  replicas: string;
  profile?: string;
  gpuClass?: string;
  wait?: boolean;
  timeout: string;
  json?: boolean;
}

export async function deployCommand(model: string, opts: DeployOptions): Promise<void> {
  const candidate: DeployModelInput = {
    model,
    replicas: Number(opts.replicas),
    ...(opts.name ? { name: opts.name } : {}),
    ...(opts.profile ? { profile: opts.profile } : {}),
    ...(opts.gpuClass ? { gpuClass: opts.gpuClass } : {}),
  };
  // The same schema the workflow uses: the CLI says what is wrong before anything starts.
  const parsed = DeployModelInputSchema.safeParse(candidate);
  if (!parsed.success) throw new CliError(`invalid deploy request: ${describeIssues(parsed.error)}`);
  const input = parsed.data;
  const name = input.name ?? model;
  await withClient(async (client) => {
    const workflowId = deploymentWorkflowId(name);
    let handle: WorkflowHandle;
    try {
      handle = await client.workflow.start('deployModel', {
        workflowId,
        taskQueue: CONTROL_TASK_QUEUE,
        args: [input],
        staticSummary: `deployment ${name}: ${model}${input.profile ? ` (${input.profile})` : ''}`,
      });
      console.error(`started ${workflowId}`);
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
      // Deploying an existing name changes its count.
      handle = client.workflow.getHandle(workflowId);
      const current = await readStatus(handle);
      if (current && input.profile && input.profile !== current.profile) {
        throw new CliError(
          `deployment ${name} runs profile ${current.profile}; changing the profile of a running deployment is not supported yet: \`llmgw undeploy ${name}\` first`,
        );
      }
      await handle.executeUpdate(scaleUpdate, { args: [input.replicas] });
      console.error(`${workflowId} exists: scaled to ${input.replicas}`);
    }
    const deadline = Date.now() + Number(opts.timeout) * 1000;
    let status: DeploymentView | undefined;
    while (!status && Date.now() < deadline) {
      status = await readStatus(handle);
      if (!status) await sleep(300);
    }
    if (!status) throw new CliError(`${workflowId} did not finish validating in time; see the Web UI`);
    if (!opts.wait) {
      print(status, opts.json);
      return;
    }
    let lastLines = '';
    for (;;) {
      status = await readStatus(handle);
      if (!status) continue;
      const lines = status.replicas.map((r) => `  ${r.replicaId.padEnd(24)} ${r.phase.padEnd(13)} ${r.reason}`).join('\n');
      if (lines !== lastLines && !opts.json)
        console.error(
          `${new Date().toISOString().slice(11, 19)} ${status.name}: ${status.phase} (${status.ready}/${status.desired} Ready)\n${lines}`,
        );
      lastLines = lines;
      if (status.phase === 'Ready') break;
      const failed = status.replicas.find((r) => r.phase === 'Failed');
      if (failed) throw new CliError(`${failed.replicaId} failed: ${failed.reason}`);
      if (Date.now() > deadline) throw new CliError(`not Ready after ${opts.timeout} s: ${status.reason || status.phase}`);
      await sleep(500);
    }
    print(status, opts.json);
  });
}

export async function statusCommand(name: string | undefined, opts: { json?: boolean }): Promise<void> {
  await withClient(async (client) => {
    if (name) {
      const status = await readStatus(client.workflow.getHandle(deploymentWorkflowId(name))).catch((error: unknown) => {
        if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name} (\`llmgw status\` lists them)`);
        throw error;
      });
      if (!status) throw new CliError(`deployment ${name} is still validating`);
      print(status, opts.json);
      return;
    }
    const views: DeploymentView[] = [];
    for await (const execution of client.workflow.list({ query: `WorkflowType = 'deployModel' AND ExecutionStatus = 'Running'` })) {
      const view = await readStatus(client.workflow.getHandle(execution.workflowId)).catch(() => undefined);
      if (view) views.push(view);
    }
    if (opts.json) {
      console.log(JSON.stringify(views, null, 2));
      return;
    }
    if (!views.length) {
      console.log('no deployments (`llmgw deploy demo --replicas 2`)');
      return;
    }
    const table = newTable({ head: ['deployment', 'model', 'profile', 'state', 'ready', 'reason'] });
    for (const v of views.sort((a, b) => a.name.localeCompare(b.name)))
      table.push([v.name, v.model, v.profile, v.phase, `${v.ready}/${v.desired}`, v.reason || '—']);
    console.log(table.toString());
  });
}

export async function scaleCommand(name: string, replicas: string, opts: { json?: boolean }): Promise<void> {
  const count = Number(replicas);
  if (!Number.isInteger(count) || count < 0) throw new CliError(`replicas must be a whole number ≥ 0, got ${replicas}`);
  await withClient(async (client) => {
    try {
      const view = await client.workflow.getHandle(deploymentWorkflowId(name)).executeUpdate(scaleUpdate, { args: [count] });
      print(view, opts.json);
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name}`);
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
      if (error instanceof WorkflowNotFoundError) throw new CliError(`no deployment named ${name}`);
      throw new CliError(failureMessage(error));
    }
    console.error(`undeploying ${name}: draining every replica`);
    if (!opts.wait) return;
    const final = (await handle.result()) as DeploymentView;
    print(final, opts.json);
  });
}

export async function logsCommand(replica: string, opts: { lines: string; follow?: boolean; rank: string }): Promise<void> {
  const replicaId = replica.startsWith('replica/') ? replica : `replica/${replica}`;
  await withClient(async (client) => {
    const view = (await client.workflow
      .getHandle(replicaId)
      .query(replicaStatusQuery)
      .catch(() => {
        throw new CliError(`no running replica ${replicaId} (\`llmgw status NAME\` lists them)`);
      })) as ReplicaView;
    const shard = view.shards.find((s) => s.rank === Number(opts.rank));
    if (!shard) throw new CliError(`${replicaId} has no rank ${opts.rank} placed (${view.phase}: ${view.reason})`);
    const node = await client.workflow.getHandle(`node/${shard.nodeId}`).query(describeNodeQuery);
    const address = node.inventory?.adminAddress;
    if (!address) throw new CliError(`node ${shard.nodeId} has not reported its admin address`);
    const admin = connectAdmin(address);
    await new Promise<void>((resolve, reject) => {
      const stream = admin.tail(shard.shardId, Number(opts.lines), Boolean(opts.follow));
      stream.on('data', (chunk: { lines: string[] }) => {
        for (const line of chunk.lines) console.log(line);
      });
      stream.on('end', () => resolve());
      stream.on('error', (error: Error) => reject(new CliError(`agent ${shard.nodeId} (${address}): ${error.message}`)));
      process.once('SIGINT', () => {
        stream.cancel();
        resolve();
      });
    }).finally(() => admin.close());
  });
}

function print(view: DeploymentView, json?: boolean): void {
  if (json) {
    console.log(JSON.stringify(view, null, 2));
    return;
  }
  console.log(
    `${view.name}: ${view.phase} — ${view.ready}/${view.desired} Ready · ${view.model} (${view.profile}) served as "${view.servedName}"`,
  );
  if (view.reason) console.log(`  ${view.reason}`);
  if (!view.replicas.length) return;
  const table = newTable({
    head: ['replica', 'state', 'nodes', 'GPUs', 'endpoint', 'reason'],
    colWidths: [null, null, null, null, null, 60],
    wordWrap: true,
  });
  for (const r of view.replicas) {
    table.push([r.replicaId, r.phase, r.nodes.join(', ') || '—', r.gpus.join(' ') || '—', r.endpoint || '—', r.reason]);
    // A multi-node replica: one line per rank, so a rank that is not up shows as such.
    if (r.shards.length > 1) {
      for (const s of [...r.shards].sort((a, b) => a.rank - b.rank))
        table.push([
          `  rank ${s.rank}`,
          s.state ?? '—',
          s.nodeId,
          `${s.gpuIndices.join(',')}${s.hcas.length ? ` (${s.hcas.join(',')})` : ''}`,
          s.pid ? `pid ${s.pid}` : '—',
          s.shardId,
        ]);
    }
  }
  console.log(table.toString());
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
