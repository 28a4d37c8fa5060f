// How the CLI reads and shows a deployment: its status (or why its workflow failed) and the
// table of its replicas, revision, rollout and autoscaling. Operator side.
import { newTable } from './table.js';
import type { WorkflowHandle } from '@temporalio/client';
import { CliError, failureMessage } from '../errors.js';
import { COMING_UP_PHASES, type DeploymentView, type ReplicaView } from '../../common/replica-types.js';
import { deploymentStatusQuery, replicaStatusQuery } from '../../workflows/definitions.js';
import { adaptersCell } from './adapters-view.js';
import { fetchProgressOf } from './fetch-progress.js';

/** The deployment's status, or the reason its workflow failed, or undefined while it validates. */
export async function readStatus(handle: WorkflowHandle): Promise<DeploymentView | undefined> {
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
    if (view.phase === 'Failed') throw new CliError(view.reason);
    return view.phase === 'Validating' ? undefined : withStepsOfComingUp(handle, view);
  } catch (error) {
    if (error instanceof CliError) throw error;
    return undefined; // the first workflow task has not run yet
  }
}

/** Replicas coming up that one read asks for their step (each ask is a query, billed on Temporal Cloud). */
const STEPS_ASKED_PER_READ = 16;

/**
 * A replica tells its deployment only what the deployment acts on, so the deployment holds one
 * that is coming up as it last heard (Pending, or Placing before a restart). The replica's own
 * view names its step (Placing, Starting, Loading) and why; a replica that does not answer
 * keeps what the deployment says.
 */
async function withStepsOfComingUp(handle: WorkflowHandle, view: DeploymentView): Promise<DeploymentView> {
  const comingUp = view.replicas.filter((r) => COMING_UP_PHASES.includes(r.phase)).slice(0, STEPS_ASKED_PER_READ);
  if (!comingUp.length) return view;
  const live = new Map<string, ReplicaView>();
  await Promise.all(
    comingUp.map(async (r) => {
      const own = await handle.client
        .getHandle(r.replicaId)
        .query(replicaStatusQuery)
        .catch(() => undefined);
      // A fetch's progress lives in its activity's heartbeats, which the workflow never sees.
      const progress = own?.phase === 'Fetching' ? await fetchProgressOf(handle.client.getHandle(r.replicaId)) : undefined;
      if (own) live.set(r.replicaId, progress ? { ...own, reason: progress } : own);
    }),
  );
  return { ...view, replicas: view.replicas.map((r) => ({ ...r, ...(live.get(r.replicaId) ?? {}) })) };
}

/** `adapters`: each Ready replica's loaded LoRA adapters (adapters-view.ts); a column only when some replica holds one. */
export function print(view: DeploymentView, json?: boolean, adapters: ReadonlyMap<string, string[] | undefined> = new Map()): void {
  if (json) {
    const replicas = view.replicas.map((r) => (adapters.has(r.replicaId) ? { ...r, adapters: adapters.get(r.replicaId) ?? null } : r));
    console.log(JSON.stringify({ ...view, replicas }, null, 2));
    return;
  }
  console.log(
    `${view.name}: ${view.phase} — ${view.ready}/${view.desired} Ready · ${view.model} (${view.profile}, revision ${view.revision ?? '—'}) served as "${view.servedName}"`,
  );
  // The pinned weights: what every replica of the revision runs, however late it is added.
  if (view.modelSource) console.log(`  weights ${view.modelSource}`);
  if (view.reason) console.log(`  ${view.reason}`);
  if (view.autoscale) {
    const a = view.autoscale;
    const last = a.lastDecision
      ? `; last decision ${a.lastDecision.from} → ${a.lastDecision.desired} at ${a.lastDecision.at.slice(11, 19)}: ${a.lastDecision.reason}`
      : '';
    console.log(
      `  autoscaled ${a.min}–${a.max} on ${a.metric} (target ${a.target}/replica${a.idleToZeroSeconds ? `, idle to zero after ${a.idleToZeroSeconds} s` : ''})${last}`,
    );
  }
  if (view.catalogRevision) console.log(`  catalog has a newer revision (${view.catalogRevision}): \`llmgw rollout ${view.name}\``);
  if (view.rollout && view.rollout.state !== 'Complete') {
    const r = view.rollout;
    console.log(
      `  rollout ${r.fromProfile} ${r.from} → ${r.toProfile} ${r.to}: ${r.state}, ${r.done}/${r.desired} (${r.mode}, maxSurge ${r.maxSurge}, maxUnavailable ${r.maxUnavailable})`,
    );
  }
  if (!view.replicas.length) return;
  const withAdapters = adapters.size > 0;
  const table = newTable({
    head: ['replica', 'revision', 'state', 'nodes', 'GPUs', 'endpoint', ...(withAdapters ? ['adapters'] : []), 'reason'],
    colWidths: [null, null, null, null, null, null, ...(withAdapters ? [40] : []), 60],
    wordWrap: true,
  });
  for (const r of view.replicas) {
    const adapterCell = withAdapters ? [adaptersCell(adapters, r.replicaId)] : [];
    table.push([
      r.replicaId,
      r.revision ?? '—',
      stateCell(r),
      r.nodes.join(', ') || '—',
      r.gpus.join(' ') || '—',
      r.endpoint || '—',
      ...adapterCell,
      besideEndpoint(r.reason, r.endpoint),
    ]);
    // A multi-node replica: one line per rank, so a rank that is not up shows as such.
    if (r.shards.length > 1) {
      for (const s of [...r.shards].sort((a, b) => a.rank - b.rank))
        table.push([
          `  rank ${s.rank}`,
          '',
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

/**
 * A replica's state, with its sleep: asleep since when and at which level, and how long its
 * last wake took (issue 38: what an operator asks of a model that answered slowly once).
 */
export function stateCell(r: Pick<ReplicaView, 'phase' | 'sleep'>): string {
  const lines: string[] = [r.phase];
  if (r.phase === 'Sleeping' && r.sleep?.since) lines[0] += ` (level ${r.sleep.level ?? '?'}, since ${r.sleep.since.slice(11, 19)})`;
  const last = r.sleep?.lastWake;
  if (last) lines.push(`last wake ${formatMs(last.tookMs)} at ${last.at.slice(11, 19)} (${last.by})`);
  return lines.join('\n');
}

export function formatMs(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

/**
 * A replica's reason without the endpoint the column beside it shows ("serving at URL" reads
 * "serving"): the workflow's reason is written to stand alone, in the Web UI and --json.
 */
function besideEndpoint(reason: string, endpoint: string): string {
  return endpoint ? reason.split(` at ${endpoint}`).join('') : reason;
}
