// `llmgw nodes`: every node workflow, read through its describe query; and what an
// operator does to one host: cordon, uncordon, remove.
import { printList } from './table.js';
import { ScheduleNotFoundError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import { withClient } from './client.js';
import { clearGpuUpdate, cordonUpdate, describeNodeQuery, uncordonUpdate } from '../../workflows/definitions.js';
import { nodeWorkflowId, reconcileScheduleId } from '../../common/names.js';
import { shownNodeState, type NodeView } from '../../common/node-types.js';

/**
 * Every running node's view. A node whose query fails (its workflow pinned to a build no worker
 * serves, a worker too busy to answer in time) is told to `unanswered` and left out, so that one
 * such node does not hide every other host from the operator.
 */
export async function listNodes(unanswered?: (workflowId: string, error: string) => void): Promise<NodeView[]> {
  return withClient(async (client) => {
    const views: NodeView[] = [];
    for await (const execution of client.workflow.list({ query: `WorkflowType = 'node' AND ExecutionStatus = 'Running'` })) {
      try {
        views.push(await client.workflow.getHandle(execution.workflowId).query(describeNodeQuery));
      } catch (error) {
        if (!unanswered) throw error;
        unanswered(execution.workflowId, error instanceof Error ? error.message : String(error));
      }
    }
    return views.sort((a, b) => a.nodeId.localeCompare(b.nodeId));
  });
}

export async function nodesCommand(opts: { json?: boolean }): Promise<void> {
  const views = await listNodes((workflowId, error) =>
    console.error(`${workflowId} did not answer its describe query (${error}): is a control worker of its build running?`),
  );
  printList(views, {
    json: opts.json,
    empty: 'no nodes: start an agent (`llmgw agent --gpus builtin:h100x8 --node-id sim-a`)',
    head: ['node', 'state', 'GPUs free/total', 'class', 'address', 'problems'],
    row: (view) => [
      view.nodeId,
      view.cordoned ? `${view.phase} (cordoned)` : shownNodeState(view),
      `${view.freeGpus.length}/${view.inventory?.gpus.length ?? 0}`,
      view.inventory?.gpuClass ?? '',
      view.inventory?.managementAddress ?? '',
      problemsOf(view).join('\n') || '—',
    ],
  });
}

/** Why a node is not Ready, its hosts' and GPUs' problems, and what its agent killed. */
function problemsOf(view: NodeView): string[] {
  const inv = view.inventory;
  return [
    // Why a node is not Ready (a silent agent, Lost after its grace) is the first thing an
    // operator asks during a network incident.
    // An unenrolled node says how to enroll it (its view's reason).
    ...((view.phase !== 'Ready' || !view.enrolled) && view.reason ? [view.reason] : []),
    ...(inv?.problems ?? []),
    ...(inv?.gpus.filter((gpu) => gpu.problems.length).map((gpu) => `GPU ${gpu.index}: ${gpu.problems.join('; ')}`) ?? []),
    // Live foreign processes show as their GPUs' problems above; say also what the agent killed.
    ...(inv?.foreignProcesses ?? [])
      .filter((f) => f.killed)
      .map((f) => `killed pid ${f.pid} (${f.command}) on GPU ${f.gpuIndices.join(',')}: ${f.note}`),
  ];
}

/** The node's view, or an error that says the node is unknown and how to list the known ones. */
async function nodeView(client: Client, nodeId: string): Promise<NodeView> {
  try {
    const handle = client.workflow.getHandle(nodeWorkflowId(nodeId));
    const { status } = await handle.describe();
    if (status.name !== 'RUNNING')
      throw new Error(`node ${nodeId} is not registered (its workflow is ${status.name}): \`llmgw nodes\` lists the registered ones`);
    return await handle.query(describeNodeQuery);
  } catch (error) {
    if (error instanceof WorkflowNotFoundError)
      throw new Error(`no node ${nodeId}: \`llmgw nodes\` lists the registered ones`, { cause: error });
    throw error;
  }
}

/** `llmgw nodes cordon|uncordon <node>`: no new placements there; what runs keeps running. */
export async function cordonCommand(nodeId: string, cordon: boolean, opts: { reason?: string }): Promise<void> {
  const view = await withClient(async (client) => {
    await nodeView(client, nodeId);
    const handle = client.workflow.getHandle(nodeWorkflowId(nodeId));
    return cordon
      ? handle.executeUpdate(cordonUpdate, { args: [{ reason: opts.reason }] })
      : handle.executeUpdate(uncordonUpdate, { args: [] });
  });
  console.log(
    cordon
      ? `cordoned ${nodeId}: nothing new is placed there; its ${view.allocations.length} shard(s) keep running (scale or undeploy to move them)`
      : `uncordoned ${nodeId}: ${view.freeGpus.length} free GPU(s) can be placed on again`,
  );
}

/** `llmgw nodes clear-gpu <node> <gpu>`: the agent forgets the GPU's fault and reports again. */
export async function clearGpuCommand(nodeId: string, gpu: string): Promise<void> {
  const gpuIndex = Number(gpu);
  if (!Number.isInteger(gpuIndex) || gpuIndex < 0) throw new Error(`GPU must be an index (0, 1, …), not ${JSON.stringify(gpu)}`);
  const result = await withClient(async (client) => {
    await nodeView(client, nodeId);
    return client.workflow.getHandle(nodeWorkflowId(nodeId)).executeUpdate(clearGpuUpdate, { args: [{ gpuIndex }] });
  });
  console.log(result.message);
}

/**
 * `llmgw nodes remove <node>`: forget a host that is gone for good: its node workflow and its
 * reconcile Schedule, which would otherwise run for ever against an agent that never answers.
 * Refused while the agent still reports (it would only register again), and while the node
 * still holds GPUs for shards, unless --force.
 */
export async function removeNodeCommand(nodeId: string, opts: { force?: boolean }): Promise<void> {
  const said = await withClient(async (client) => {
    const view = await nodeView(client, nodeId);
    if (view.phase === 'Ready') {
      throw new Error(
        `node ${nodeId} is Ready: its agent still reports and would register again. Stop the agent first (cordon it and move its replicas away), then remove it.`,
      );
    }
    if (view.allocations.length && !opts.force) {
      const replicas = [...new Set(view.allocations.map((a) => a.replicaId))].join(', ');
      throw new Error(
        `node ${nodeId} (${view.phase}) still holds GPUs for ${view.allocations.length} shard(s) of ${replicas}: they are released when it turns Lost, or scale them away; --force removes it now`,
      );
    }
    await client.workflow
      .getHandle(nodeWorkflowId(nodeId))
      .terminate(`removed by llmgw nodes remove (${view.phase}: ${view.reason || 'no reason given'})`);
    let schedule = `Schedule ${reconcileScheduleId(nodeId)} deleted`;
    try {
      await client.schedule.getHandle(reconcileScheduleId(nodeId)).delete();
    } catch (error) {
      if (!(error instanceof ScheduleNotFoundError)) throw error;
      schedule = `it had no Schedule ${reconcileScheduleId(nodeId)}`;
    }
    return `removed ${nodeId} (${view.phase}): workflow ${nodeWorkflowId(nodeId)} terminated, ${schedule}. If its agent starts again it registers anew.`;
  });
  console.log(said);
}
