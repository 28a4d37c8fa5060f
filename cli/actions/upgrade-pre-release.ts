// Moving runs whose build predates versioned releases (or whose build no worker serves any
// more): they cannot hand over at continue-as-new, because their code gated changes with
// patches the current code no longer has, so `llmgw upgrade` ends them and lets
// reconciliation rebuild them from the agents in adopt mode. Engines are never touched: a
// replica workflow that ends leaves its engine running, its agent reports it, and
// reconcileNode starts a replica that adopts it. docs/upgrades.md, "Runs from before the first release".
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@temporalio/client';
import type { DeployModelInput, DeploymentView } from '../../common/replica-types.js';
import { CONTROL_TASK_QUEUE } from '../../common/names.js';
import { ENDED_TO_BE_ADOPTED } from '../../common/reconcile-types.js';
import { deploymentStatusQuery, scaleUpdate, setAutoscaleUpdate } from '../../workflows/definitions.js';

/** The order runs are ended in: deployments first, so none replaces a replica that ends. */
const END_ORDER = ['deployModel', 'replica', 'routes', 'node'];

export interface EndedRun {
  workflowId: string;
  type: string;
  buildId: string;
}

/**
 * The first release in releases.json (until one is cut, the release in progress): builds of an
 * older version predate versioned releases.
 */
export function firstRelease(): string {
  const root = join(__dirname, '../../..');
  const table = JSON.parse(readFileSync(join(root, 'releases.json'), 'utf8')) as { releases: { version: string }[] };
  return table.releases[0]?.version ?? (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;
}

/**
 * Ends every given run and waits until reconciliation has rebuilt them: node workflows come
 * back when their agents register again, the routes workflow when the control worker next
 * looks, and each deployment with running replicas is rebuilt around them by reconciliation
 * (its replicas and their engines adopted). A deployment with nothing running (at zero, or
 * still placing) is started again here, there being no engine to rebuild it from. What the
 * old run was told (scale, autoscaling) is given to the new one. Returns how many ended.
 */
export async function endAndAdopt(client: Client, runs: EndedRun[], reason: string, say: (line: string) => void, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  const sorted = [...runs].sort((a, b) => END_ORDER.indexOf(a.type) - END_ORDER.indexOf(b.type));
  const deployments: { view: DeploymentView; input: DeployModelInput }[] = [];
  for (const run of sorted) {
    const handle = client.workflow.getHandle(run.workflowId);
    if (run.type === 'deployModel') {
      const view = await handle.query(deploymentStatusQuery).catch(() => undefined);
      const input = await startInputOf(client, run.workflowId);
      if (view && input) deployments.push({ view, input });
    }
    await handle.terminate(`${ENDED_TO_BE_ADOPTED} (${reason}); reconciliation adopts its engines`).catch(() => undefined);
    say(`ended ${run.workflowId} (${run.type} on ${run.buildId})`);
  }
  const nodes = sorted.filter((r) => r.type === 'node').map((r) => r.workflowId);
  await until(deadline, async () => (await Promise.all(nodes.map((id) => isRunning(client, id)))).every(Boolean));
  say(`${nodes.length} node workflow(s) running again (their agents registered)`);

  for (const { view, input } of deployments) {
    const id = `deployment/${view.name}`;
    const handle = client.workflow.getHandle(id);
    const serving = view.replicas.filter((r) => r.phase === 'Ready' || r.phase === 'Unknown').length;
    // A closed run still answers queries (a worker replays it): only a running one counts.
    const readyNow = async (): Promise<number> =>
      (await isRunning(client, id)) ? ((await handle.query(deploymentStatusQuery).catch(() => undefined))?.ready ?? 0) : -1;
    if (serving) await until(deadline, async () => (await readyNow()) >= serving);
    if (!(await isRunning(client, id))) await startAgain(client, view, input, reason);
    const adopted = Math.max(0, await readyNow());
    say(
      `${id}: ${adopted} of ${serving} serving replica(s) adopted${adopted < serving ? ' so far (reconciliation adopts the rest when it next runs)' : ''}`,
    );
    // What the old run was told: its count (the rebuilt run wants only what was found), or autoscaling.
    if (input.autoscale) await handle.executeUpdate(setAutoscaleUpdate, { args: [input.autoscale] });
    else if (adopted >= serving && (await handle.query(deploymentStatusQuery)).desired !== view.desired)
      await handle.executeUpdate(scaleUpdate, { args: [view.desired] });
  }
  return sorted.length;
}

/** A deployment reconciliation had nothing to rebuild from: at zero, settings as they were. */
async function startAgain(client: Client, view: DeploymentView, input: DeployModelInput, reason: string): Promise<void> {
  const fresh: DeployModelInput = {
    model: input.model,
    name: view.name,
    profile: view.profile,
    replicas: 0,
    ...(input.labels ? { labels: input.labels } : {}),
    ...(input.rollout ? { rollout: input.rollout } : {}),
    ...(input.maxSurge !== undefined ? { maxSurge: input.maxSurge } : {}),
    ...(input.maxUnavailable !== undefined ? { maxUnavailable: input.maxUnavailable } : {}),
    rebuilt: { reason: `${reason}: moved by llmgw upgrade` },
  };
  await client.workflow.start('deployModel', {
    workflowId: `deployment/${view.name}`,
    taskQueue: CONTROL_TASK_QUEUE,
    args: [fresh],
    memo: { rebuilt: true },
    staticSummary: `${view.name}: ${input.model} (${view.profile}), moved by llmgw upgrade`,
  });
}

async function isRunning(client: Client, workflowId: string): Promise<boolean> {
  const description = await client.workflow
    .getHandle(workflowId)
    .describe()
    .catch(() => undefined);
  return description?.status.name === 'RUNNING';
}

async function until(deadline: number, done: () => Promise<boolean>): Promise<void> {
  while (Date.now() < deadline && !(await done())) await sleep(1_000);
}

/** The deployModel input of the run that now holds the id (its start event). */
async function startInputOf(client: Client, workflowId: string): Promise<DeployModelInput | undefined> {
  const history = await client.workflow
    .getHandle(workflowId)
    .fetchHistory()
    .catch(() => undefined);
  const payload = history?.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  if (!payload) return undefined;
  return client.options.loadedDataConverter.payloadConverter.fromPayload<DeployModelInput>(payload);
}
