// `llmgw weights prefetch MODEL[/PROFILE] [--nodes A,B | --gpu-class C]`: fetches a model's
// weights onto hosts without placing anything (the weightsPrefetch workflow), showing each
// host's progress as its fetchWeights activity heartbeats it. A running deployment of the model
// gives its pinned revision (what its replicas run); otherwise the catalog's source is pinned
// now. Operator side.
import { WorkflowFailedError, type Client, type WorkflowHandle } from '@temporalio/client';
import { withClient } from './client.js';
import { pendingFetches } from './fetch-progress.js';
import { CliError } from '../errors.js';
import { queryLiteral } from '../../common/safe-name.js';
import { CONTROL_TASK_QUEUE } from '../../common/names.js';
import { deploymentStatusQuery } from '../../workflows/definitions.js';
import { formatBytes } from '../../agent/weights/progress.js';
import type { weightsPrefetch, WeightsPrefetchInput } from '../../workflows/weights/prefetch.js';

export interface PrefetchOptions {
  nodes?: string;
  gpuClass?: string;
  timeout: string;
  json?: boolean;
}

/** The pin and GPU class of a running deployment of the model (and profile), if there is one. */
async function deployedPin(
  client: Client,
  model: string,
  profile: string | undefined,
): Promise<{ deployment: string; modelSource: string; sourceAsWritten?: string; gpuClass?: string } | undefined> {
  const query = `WorkflowType = 'deployModel' AND ExecutionStatus = 'Running' AND LlmgwModel = ${queryLiteral('model', model)}`;
  for await (const execution of client.workflow.list({ query })) {
    const memo = execution.memo?.deployment as { profile?: string; source?: { written?: string } } | undefined;
    if (profile && memo?.profile !== profile) continue;
    const view = await client.workflow
      .getHandle(execution.workflowId)
      .query(deploymentStatusQuery)
      .catch(() => undefined);
    if (!view?.modelSource) continue;
    const gpuClass = execution.searchAttributes?.LlmgwGpuClass;
    return {
      deployment: view.name,
      modelSource: view.modelSource,
      // So the control worker signs that pin again while the catalog still names its source.
      ...(memo?.source?.written ? { sourceAsWritten: memo.source.written } : {}),
      ...(Array.isArray(gpuClass) && typeof gpuClass[0] === 'string' ? { gpuClass: gpuClass[0] } : {}),
    };
  }
  return undefined;
}

/** Each host's progress line, from the workflow's pending fetchWeights activities. */
async function progressLines(handle: WorkflowHandle): Promise<string[]> {
  return (await pendingFetches(handle)).map(
    (f) => `${f.host}: ${f.summary ?? 'waiting for the agent'}${f.attempt > 1 ? ` (try ${f.attempt}: ${f.lastFailure ?? ''})` : ''}`,
  );
}

export async function weightsPrefetchCommand(target: string, opts: PrefetchOptions): Promise<void> {
  const [model, profile] = target.split('/', 2) as [string, string | undefined];
  if (!model) throw new CliError('name a catalog model: `llmgw weights prefetch MODEL[/PROFILE]`');
  if (opts.nodes && opts.gpuClass) throw new CliError('choose --nodes or --gpu-class, not both');
  const nodes = opts.nodes
    ?.split(',')
    .map((n) => n.trim())
    .filter(Boolean);
  await withClient(async (client) => {
    const deployed = await deployedPin(client, model, profile);
    const input: WeightsPrefetchInput = {
      model,
      ...(profile ? { profile } : {}),
      ...(deployed ? { modelSource: deployed.modelSource } : {}),
      ...(deployed?.sourceAsWritten ? { sourceAsWritten: deployed.sourceAsWritten } : {}),
      ...(nodes?.length ? { nodes } : {}),
      ...((opts.gpuClass ?? deployed?.gpuClass) ? { gpuClass: opts.gpuClass ?? deployed?.gpuClass } : {}),
    };
    if (!opts.json)
      console.error(
        deployed
          ? `prefetching ${deployed.modelSource}, the revision deployment ${deployed.deployment} runs`
          : `prefetching ${model}${profile ? `/${profile}` : ''} at what its source points at now`,
      );
    const handle = await client.workflow.start<typeof weightsPrefetch>('weightsPrefetch', {
      workflowId: `weights/prefetch/${model}/${Date.now().toString(36)}`,
      taskQueue: CONTROL_TASK_QUEUE,
      args: [input],
      workflowExecutionTimeout: `${Number(opts.timeout)} seconds`,
    });
    const result = handle.result();
    let shown = '';
    for (let done = false; !done;) {
      done = await Promise.race([result.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 1_000))]).catch(
        () => true,
      );
      const lines = done ? [] : await progressLines(handle);
      if (!opts.json && lines.length && lines.join('\n') !== shown) {
        shown = lines.join('\n');
        for (const line of lines) console.error(`  ${line}`);
      }
    }
    let outcome: Awaited<typeof result>;
    try {
      outcome = await result;
    } catch (error) {
      if (error instanceof WorkflowFailedError) throw new CliError(failureText(error));
      throw error;
    }
    if (opts.json) console.log(JSON.stringify(outcome, null, 2));
    else
      for (const host of outcome.hosts)
        console.log(
          host.ok
            ? `${host.nodeId}: holds ${outcome.modelSource} (${formatBytes(host.bytesTotal ?? 0)}; ${formatBytes(host.bytesFetched ?? 0)} fetched in ${(host.seconds ?? 0).toFixed(1)} s)`
            : `${host.nodeId}: not fetched: ${host.error}`,
        );
    const failed = outcome.hosts.filter((h) => !h.ok);
    if (failed.length)
      throw new CliError(
        `${failed.length} of ${outcome.hosts.length} hosts did not fetch it (their reasons above); run it again for those with --nodes`,
      );
  });
}

/** The innermost message of a failed workflow: the activity's own ApplicationFailure says what to do. */
export function failureText(error: WorkflowFailedError): string {
  let cause: unknown = error.cause;
  while (cause instanceof Error && cause.cause instanceof Error) cause = cause.cause;
  return cause instanceof Error ? cause.message : error.message;
}
