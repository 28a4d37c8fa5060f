// Revocation of what already runs, control side: which running replicas a node's report names
// run a revision the catalog or the key file took away (activities/revision-liveness.ts), so that
// reconciliation stops their engines and the replica ends saying why. Asked by inspectNode on
// every reconcile, which the catalog notifier starts for each node when what the catalog allows
// changes or a key leaves the key file. A model or profile gone from the catalog is reconcile's
// own rule (plan.ts); here, a revision the catalog revokes or whose key is gone, and a placement
// made with a key that is gone. Nothing is asked of Temporal beyond what
// reconcile asks already unless a replica is such a suspect.
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { Catalog } from '../catalog/schema.js';
import { readCatalogKeys, type CatalogKey } from '../common/catalog-key.js';
import { verifyPlacementTicket } from '../common/placement-ticket.js';
import type { ReplicaFacts } from '../common/reconcile-types.js';
import type { DeploymentView } from '../common/replica-types.js';
import { keyRefusal, revisionRefusal, runningDeployment } from './revision-liveness.js';

/** Tries of inspectNode in which an unreadable suspect's deployment fails it (retried) rather than being skipped. */
const DEPLOYMENT_LOOKUP_ATTEMPTS = 5;

function activityQueue(): string | undefined {
  try {
    return Context.current().info.taskQueue;
  } catch {
    return undefined;
  }
}

function warn(message: string): void {
  try {
    Context.current().log.warn(message);
  } catch {
    console.warn(message);
  }
}

function activityAttempt(): number {
  try {
    return Context.current().info.attempt;
  } catch {
    return DEPLOYMENT_LOOKUP_ATTEMPTS;
  }
}

/**
 * replica id → why its revision is no longer live, for the running replicas in `replicas` whose
 * rank 0 ticket verifies (the revision is read from the ticket the control worker signed, never
 * from the replica's word) and whose deployment runs here.
 */
export async function revokedReplicas(
  client: Client,
  replicas: Record<string, ReplicaFacts>,
  catalog: Catalog,
  catalogKeyFile: string,
): Promise<Record<string, string>> {
  const keys = readCatalogKeys(catalogKeyFile).all;
  const queue = activityQueue();
  const deployments = new Map<string, Promise<DeploymentView | undefined>>();
  const revoked: Record<string, string> = {};
  for (const [replicaId, facts] of Object.entries(replicas)) {
    const view = facts.view;
    // A replica already draining is ending anyway: its requests in flight are let finish.
    if (facts.replica !== 'running' || !view || view.phase === 'Draining' || view.phase === 'Stopped') continue;
    const leader = view.shards.find((s) => s.rank === 0) ?? view.shards[0];
    const verdict = verifyPlacementTicket(leader?.ticket ?? '', keys);
    if (!verdict.ok) {
      // Placed with a key since taken out of the key file (a rotation's old key): the engine runs
      // on a ticket nothing here vouches for any more, and that renews nothing, so it stops now.
      // No ticket yet (or one of 0.2.0), or a malformed one: its next renewal is checked instead.
      const gone = ticketKeyGone(leader?.ticket ?? '', keys);
      if (gone) revoked[replicaId] = gone;
      continue;
    }
    if (verdict.ticket.replicaId !== replicaId) continue;
    const { ticket } = verdict;
    // Only a suspect is checked against its deployment, so a fleet with nothing revoked pays nothing.
    const suspect =
      ticket.revision !== '' && (keyRefusal(ticket.revision, keys) || (view.revision && catalog.revoked?.includes(view.revision)));
    if (!suspect) continue;
    if (!deployments.has(ticket.deployment)) deployments.set(ticket.deployment, runningDeployment(client, ticket.deployment, queue));
    let deployment: DeploymentView | undefined;
    try {
      deployment = await deployments.get(ticket.deployment);
    } catch (error) {
      // Unreadable now (a run checking its seal, a revision not resolved yet): skipping it would
      // leave a revoked engine running until the node's next scheduled reconcile, so the
      // reconcile is retried, a few times; after that this replica waits for the next one.
      if (activityAttempt() < DEPLOYMENT_LOOKUP_ATTEMPTS)
        throw ApplicationFailure.retryable(
          `deployment ${ticket.deployment} of suspect ${replicaId} could not be read (${String(error)}); retrying`,
        );
      warn(
        `revoked-replicas: deployment ${ticket.deployment} of ${replicaId} could not be read: ${String(error)}; left to the next reconcile`,
      );
      continue;
    }
    if (!deployment) continue;
    // A revision its deployment no longer runs is the deployment's to stop (a finished rollout
    // drains it, requests in flight and all); here only what the catalog or the key file revoked.
    if (deployment.revisions !== undefined && !deployment.revisions.some((r) => r.signature === ticket.revision)) continue;
    const why = revisionRefusal(deployment, ticket.revision, catalog, keys);
    if (why) revoked[replicaId] = why;
  }
  return revoked;
}

/** Why a ticket signed with a key the file no longer holds is void, or undefined for any other ticket. */
export function ticketKeyGone(ticket: string, keys: CatalogKey[]): string | undefined {
  const keyId = /\.(v[12])\.([0-9a-f]{12})\.[A-Za-z0-9_-]+$/.exec(ticket)?.[2];
  if (keyId === undefined || keys.some((k) => k.id === keyId)) return undefined;
  return `it was placed with key ${keyId}, which is no longer in the control worker's key file`;
}
