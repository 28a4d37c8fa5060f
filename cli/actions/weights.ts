// `llmgw weights ls [NODE]` and `llmgw weights rm NODE MODEL[@REV]`: what each host's weights
// cache holds, as its agent last reported it to the node workflow (a query, no event), and the
// removal of a revision no shard runs (the weightsRemove workflow, on the host's queue).
// Operator side; `weights prefetch` is in weights-prefetch.ts.
import { WorkflowFailedError, WorkflowNotFoundError } from '@temporalio/client';
import { printList } from './table.js';
import { withClient } from './client.js';
import { CliError } from '../errors.js';
import { listNodes } from './nodes.js';
import { describeNodeQuery } from '../../workflows/definitions.js';
import { CONTROL_TASK_QUEUE, nodeWorkflowId } from '../../common/names.js';
import type { NodeView } from '../../common/node-types.js';
import { formatBytes } from '../../agent/weights/progress.js';
import type { weightsRemove } from '../../workflows/weights/remove.js';
import { failureText } from './weights-prefetch.js';

export async function weightsLsCommand(nodeId: string | undefined, opts: { json?: boolean }): Promise<void> {
  const views: NodeView[] = nodeId
    ? [
        await withClient((client) =>
          client.workflow
            .getHandle(nodeWorkflowId(nodeId))
            .query(describeNodeQuery)
            .catch((error: unknown) => {
              if (error instanceof WorkflowNotFoundError) throw new CliError(`no node ${nodeId} (\`llmgw nodes\` lists them)`);
              throw error;
            }),
        ),
      ]
    : await listNodes((workflowId, error) => console.error(`${workflowId} did not answer (${error}); left out`));
  const rows = views.flatMap((view) => (view.weights ?? []).map((held) => ({ nodeId: view.nodeId, ...held })));
  printList(rows, {
    json: opts.json,
    empty: nodeId
      ? `${nodeId} holds no weights (or its agent has not reported them yet)`
      : 'no host holds any weights: `llmgw weights prefetch MODEL` fetches them without placing anything',
    head: ['node', 'model', 'revision', 'size', 'last used', 'in use by'],
    order: (a, b) => a.nodeId.localeCompare(b.nodeId) || a.repo.localeCompare(b.repo),
    row: (row) => [
      row.nodeId,
      row.repo,
      row.commit.slice(0, 12),
      formatBytes(row.bytes),
      row.lastUsedAt.replace('T', ' ').slice(0, 19),
      row.inUseBy.join(', ') || '—',
    ],
  });
}

/** `MODEL[@REV]`: the hub repository as `weights ls` shows it (ORG/NAME, hf:// allowed) and a commit or its prefix. */
export function parseWeightsTarget(text: string): { repo: string; commit?: string } {
  const bare = text.replace(/^hf:\/\//, '');
  const at = bare.lastIndexOf('@');
  const repo = at > 0 ? bare.slice(0, at) : bare;
  const commit = at > 0 ? bare.slice(at + 1) : undefined;
  if (!/^[\w.-]+\/[\w.-]+$/.test(repo))
    throw new CliError(
      `${text}: name the repository as \`llmgw weights ls\` shows it, ORG/NAME[@REVISION] (for example meta-llama/Llama-3.1-8B@0e9e39f2)`,
    );
  if (commit !== undefined && !/^[0-9a-f]{4,40}$/.test(commit))
    throw new CliError(`${text}: the revision after @ is a commit (or its first hex digits) as \`llmgw weights ls\` shows it`);
  return { repo, ...(commit ? { commit } : {}) };
}

export async function weightsRmCommand(nodeId: string, target: string, opts: { json?: boolean }): Promise<void> {
  const { repo, commit } = parseWeightsTarget(target);
  await withClient(async (client) => {
    await client.workflow
      .getHandle(nodeWorkflowId(nodeId))
      .query(describeNodeQuery)
      .catch((error: unknown) => {
        if (error instanceof WorkflowNotFoundError) throw new CliError(`no node ${nodeId} (\`llmgw nodes\` lists them)`);
        throw error;
      });
    try {
      const result = await client.workflow.execute<typeof weightsRemove>('weightsRemove', {
        workflowId: `weights/rm/${nodeId}/${Date.now().toString(36)}`,
        taskQueue: CONTROL_TASK_QUEUE,
        args: [{ nodeId, repo, ...(commit ? { commit } : {}) }],
        workflowExecutionTimeout: '10 minutes',
      });
      if (opts.json) console.log(JSON.stringify(result, null, 2));
      else for (const r of result.removed) console.log(`${nodeId}: removed ${r.source} (${formatBytes(r.bytes)})`);
    } catch (error) {
      if (!(error instanceof WorkflowFailedError)) throw error;
      // ActivityFailure → the agent's ApplicationFailure, whose message says what to do.
      const message = failureText(error);
      throw new CliError(
        /schedule.?to.?start|ScheduleToStart/i.test(message)
          ? `the agent on ${nodeId} did not pick up the removal: is it running? (\`llmgw nodes\`)`
          : `${nodeId}: ${message}`,
      );
    }
  });
}
