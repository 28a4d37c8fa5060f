// Tells running deployments when the catalog's entry for their profile changed, so that
// `llmgw status` says "the catalog has a newer revision" and deployments started with
// `rollout: auto` roll out by themselves. Control side, in the control worker.
//
// The catalog file is looked at every few seconds (process-local, no Temporal cost); only a
// change lists the deployments, and only those whose memo shows another catalog revision are
// signalled, so steady state and restarts of the worker cost nothing per deployment.
// A change to what the catalog allows at all (a model or profile gone, the `revoked` list) also
// has the routes workflow resync, so routes of a revision no longer live are withdrawn now
// (activities/revision-liveness.ts), not at their replica's next change, and has every node
// reconciled, which stops the engines of such revisions (activities/revoked-replicas.ts). A key
// gone from the worker's key file (key-file-watch.ts) revokes what it signed: the same, at once.
import type { Client } from '@temporalio/client';
import { CONTROL_TASK_QUEUE } from '../common/names.js';
import type { ReconcileNodeInput } from '../common/reconcile-types.js';
import type { CatalogSource } from '../catalog/watch.js';
import type { KeyFileRemovals } from './key-file-watch.js';
import { profileSnapshot } from '../catalog/lookup.js';
import { everyWithoutOverlap } from '../common/every.js';
import { revisionOf } from '../common/revision.js';
import type { ProfileSnapshot } from '../common/replica-types.js';
import { catalogChangedSignal, describeNodeQuery } from '../workflows/definitions.js';
import { resyncRoutesSignal, ROUTES_WORKFLOW_ID } from '../workflows/routes/definitions.js';

const CHECK_EVERY_MS = 5_000;

interface DeploymentMemo {
  model?: string;
  profile?: string;
  revision?: string;
  catalogRevision?: string;
  /** The catalog's source as written and the commit it was pinned to (hub sources). */
  source?: { written?: string; pinned?: string };
}

/** Each model/profile as the catalog writes it (JSON of its snapshot; the revision is computed per deployment, whose pin it keeps). */
export function catalogSnapshots(catalog: CatalogSource): Map<string, string> {
  const revisions = new Map<string, string>();
  for (const model of catalog.get().models) {
    for (const profile of model.profiles) revisions.set(`${model.name}/${profile.name}`, JSON.stringify(profileSnapshot(model, profile)));
  }
  return revisions;
}

/**
 * The catalog's revision as this deployment would get it: a source the catalog still writes as
 * the deployment's was is kept at its pin (a rollout keeps it), so pinning alone is no news.
 */
function revisionFor(snapshotJson: string, memo: DeploymentMemo): string {
  const snapshot = JSON.parse(snapshotJson) as ProfileSnapshot;
  const pinned = memo.source?.written === snapshot.modelSource && memo.source.pinned ? memo.source.pinned : snapshot.modelSource;
  return revisionOf({ ...snapshot, modelSource: pinned });
}

export async function notifyDeployments(client: Client, revisions: Map<string, string>, log: (line: string) => void): Promise<number> {
  let told = 0;
  for await (const execution of client.workflow.list({ query: `WorkflowType = 'deployModel' AND ExecutionStatus = 'Running'` })) {
    const memo = execution.memo?.deployment as DeploymentMemo | undefined;
    if (!memo?.model || !memo.profile) continue;
    const snapshot = revisions.get(`${memo.model}/${memo.profile}`);
    const revision = snapshot === undefined ? undefined : revisionFor(snapshot, memo);
    if (!revision || revision === (memo.catalogRevision ?? memo.revision)) continue;
    await client.workflow
      .getHandle(execution.workflowId)
      .signal(catalogChangedSignal, { profile: memo.profile, revision })
      .then(() => told++)
      .catch((error: unknown) => log(`could not tell ${execution.workflowId} about the catalog: ${String(error)}`));
  }
  return told;
}

/** What the catalog allows at all: its models and profiles by name, and the revisions it revokes. */
export function catalogAllows(catalog: CatalogSource): string {
  const current = catalog.get();
  const profiles = current.models.flatMap((m) => m.profiles.map((p) => `${m.name}/${p.name}`)).sort();
  return JSON.stringify([profiles, [...(current.revoked ?? [])].sort()]);
}

/**
 * Has the routes workflow sign its table again when what the catalog allows changed, or, at the
 * worker's start, when the catalog revokes anything (it may have while no worker watched), or when
 * keys left the key file; and then, when it allows less or a key went, every node reconciled.
 * A catalog edit and a key removal seen on one tick make one round, not two.
 */
async function withdrawRevoked(
  client: Client,
  catalog: CatalogSource,
  last: string | undefined,
  keysGone: string[],
  log: (line: string) => void,
  retry: Map<string, string>,
): Promise<string> {
  const allows = catalogAllows(catalog);
  const first = last === undefined;
  const catalogNews = first ? Boolean(catalog.get().revoked?.length) : allows !== last;
  // Nodes a revocation could not reach on an earlier tick: tried again, each for its own news.
  for (const [nodeId, why] of retry) {
    retry.delete(nodeId);
    for (const failed of await reconcileEveryNode(client, why, log, [nodeId])) retry.set(failed, why);
  }
  if (!catalogNews && keysGone.length === 0) return allows;
  const why = keysGone.length
    ? `key(s) ${keysGone.join(', ')} left the catalog key file: what they signed is revoked`
    : 'what the catalog allows changed';
  // No routes workflow yet: the one that starts seeds its table through the same check.
  await client.workflow
    .getHandle(ROUTES_WORKFLOW_ID)
    .signal(resyncRoutesSignal, { reason: `${why}: routes of revisions no longer live are withdrawn` })
    .then(() => log(`catalog: ${why}: routes are signed again, and those of revoked revisions withdrawn`))
    .catch((error: unknown) => log(`catalog: could not have the routes signed again: ${String(error)}`));
  // Only a withdrawal can leave engines running that must stop; an added profile stops nothing.
  if (keysGone.length || first || withdraws(last, allows))
    for (const failed of await reconcileEveryNode(client, why, log)) retry.set(failed, why);
  return allows;
}

/** Whether `after` allows less than `before`: a model or profile gone, or a revision newly revoked. */
export function withdraws(before: string, after: string): boolean {
  const [profilesBefore, revokedBefore] = JSON.parse(before) as [string[], string[]];
  const [profilesAfter, revokedAfter] = JSON.parse(after) as [string[], string[]];
  return profilesBefore.some((p) => !profilesAfter.includes(p)) || revokedAfter.some((r) => !revokedBefore.includes(r));
}

/**
 * One reconcileNode per node: each stops the engines of revisions no longer live and ends their
 * replicas saying so. O(hosts) once per change of what the catalog allows or of the keys it is
 * signed with; nothing otherwise. A node whose agent runs `--reconcile dry-run` gets a dry run,
 * as its own reconciles are. Returns the nodes it could not start one for (their view did not
 * answer, or the start failed), for the next tick to try again.
 */
export async function reconcileEveryNode(
  client: Client,
  why: string,
  log: (line: string) => void,
  only?: readonly string[],
): Promise<string[]> {
  const nodes: string[] = [];
  if (only) nodes.push(...only);
  else
    for await (const execution of client.workflow.list({ query: `WorkflowType = 'node' AND ExecutionStatus = 'Running'` }))
      nodes.push(execution.workflowId.replace(/^node\//, ''));
  const at = Date.now();
  const failed: string[] = [];
  for (const nodeId of nodes) {
    try {
      const view = await client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);
      const input: ReconcileNodeInput = { nodeId, trigger: `revocation: ${why}`, ...(view.reconcileDryRun ? { dryRun: true } : {}) };
      await client.workflow.start('reconcileNode', {
        workflowId: `reconcile/${nodeId}/revocation-${at}`,
        taskQueue: CONTROL_TASK_QUEUE,
        args: [input],
        workflowExecutionTimeout: '5 minutes',
        staticSummary: `reconcile ${nodeId}: ${why}`,
      });
    } catch (error) {
      failed.push(nodeId);
      log(`catalog: could not reconcile ${nodeId} after a revocation (tried again in ${CHECK_EVERY_MS / 1000} s): ${String(error)}`);
    }
  }
  if (nodes.length) log(`catalog: ${why}: reconciling ${nodes.length - failed.length} node(s) to stop engines of revisions no longer live`);
  return failed;
}

/** Starts watching (and `keys`, the worker's key file, when it signs); returns a function that stops it. */
export function watchCatalogForDeployments(
  client: Client,
  catalog: CatalogSource,
  log: (line: string) => void,
  keys?: KeyFileRemovals,
): () => void {
  let last = '';
  let allowed: string | undefined;
  // Removals seen but not yet acted on: a tick that fails (Temporal away) leaves them to the next.
  let keysGone: string[] = [];
  const retryNodes = new Map<string, string>();
  return everyWithoutOverlap(CHECK_EVERY_MS, async () => {
    try {
      keysGone = [...new Set([...keysGone, ...(keys?.removed() ?? [])])];
      allowed = await withdrawRevoked(client, catalog, allowed, keysGone, log, retryNodes);
      keysGone = [];
      const revisions = catalogSnapshots(catalog);
      const key = JSON.stringify([...revisions.entries()]);
      if (key === last) return;
      const told = await notifyDeployments(client, revisions, log);
      last = key;
      if (told) log(`catalog: told ${told} deployment(s) about a new revision of their profile`);
    } catch (error) {
      log(`catalog: could not check deployments against it: ${String(error)}`);
    }
  });
}
