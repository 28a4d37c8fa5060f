// The control worker signs routes, and only true ones: whatever a routeChanged signal or a
// route memo says, the route it signs is read from the replica workflow itself (run by this
// control plane's workers) and its rank 0's placement ticket, which this worker signed when it
// placed it. Control side. Routers install only routes whose signature verifies, so a signal
// from anyone else, or a hand-started replica that `adopt`s an endpoint of its choosing, moves
// no traffic (docs/security.md).
import { ApplicationFailure, Context } from '@temporalio/activity';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { CatalogSource } from '../catalog/watch.js';
import { readCatalogKeys } from '../common/catalog-key.js';
import { verifyPlacementTicket } from '../common/placement-ticket.js';
import { ROUTABLE_PHASES, type DeploymentView, type ShardPlacement } from '../common/replica-types.js';
import { signRoute } from '../common/route-signature.js';
import { httpsOf } from '../common/engine-tls.js';
import { checkAttestedEndpoint } from './endpoint-check.js';
import { describeNodeQuery, replicaStatusQuery } from '../workflows/definitions.js';
import { nodeWorkflowId, parseReplicaWorkflowId } from '../common/names.js';
import type { RouteEntry } from '../workflows/routes/definitions.js';
import { revisionRefusal, runningDeployment } from './revision-liveness.js';

/**
 * `trusted`: signed without the agent's attestation, on a worker that trusts unenrolled agents (why);
 * `withdrawn`: why a replica that says it serves is taken out of every router anyway.
 */
type Verdict = { route: RouteEntry; trusted?: string; withdrawn?: string } | { refused: string };

export interface RouteSigningOptions {
  /** `--trust-unenrolled-agents` (or no catalog key): a node with no enrolled key is routed unattested, as before 0.3.0. */
  trustUnenrolled?: boolean;
  /** The catalog, for revocation (activities/revision-liveness.ts). */
  catalog?: CatalogSource;
}

/** Engines never listen below this (the agent refuses such ports: agent/supervisor/start/start-checks.ts). */
const FIRST_UNPRIVILEGED_PORT = 1024;

/**
 * Attempts of one signRoutes call during which a deployment that cannot be read (a query that
 * failed: a run checking the state it was handed, a worker restarting) retries the batch rather
 * than refusing its routes; with the activity's backoff, about half a minute. After that the
 * entry is refused, so that one broken deployment cannot hold every other route back.
 */
const DEPLOYMENT_LOOKUP_ATTEMPTS = 5;

function activityQueue(): string | undefined {
  try {
    return Context.current().info.taskQueue;
  } catch {
    return undefined;
  }
}

function activityAttempt(): number {
  try {
    return Context.current().info.attempt;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

/** A deployment as revocation reads it: its view, none (not running here), or why it could not be read. */
export type DeploymentLookup = { view?: DeploymentView } | { unreadable: string };

/**
 * The route `entry` names as its replica's own state shows it, signed; a withdrawal (not
 * routable) unsigned; or why it is refused. Without a key file, `entry` as it came (unsigned).
 */
export async function trueRoute(
  client: Client,
  entry: RouteEntry,
  catalogKeyFile: string | undefined,
  options: RouteSigningOptions = {},
  deployments = new Map<string, Promise<DeploymentLookup>>(),
): Promise<Verdict> {
  if (catalogKeyFile === undefined) return { route: entry };
  // Whatever key chain the entry claims is dropped too: only rank 0's ticket says it (below).
  const { signature: _ignored, keyChain: _claimed, tlsPin: _pinned, ...claimed } = entry;
  const handle = client.workflow.getHandle(entry.replicaId);
  let description;
  try {
    description = await handle.describe();
  } catch (error) {
    if (error instanceof WorkflowNotFoundError) return { route: { ...claimed, phase: 'Stopped' } };
    throw error;
  }
  if (description.status.name !== 'RUNNING') return { route: { ...claimed, phase: 'Stopped' } };
  // The live run chain: the route signed names it whatever chain the entry claims (an earlier
  // life of this replica id), and only a ticket issued to it routes (below).
  const chain = description.raw.workflowExecutionInfo?.firstRunId || description.runId;
  const queue = activityQueue();
  if (description.type !== 'replica' || (queue !== undefined && description.taskQueue !== queue)) {
    return {
      refused: `${entry.replicaId} is a ${description.type} workflow on task queue ${description.taskQueue}, not a replica this control plane runs`,
    };
  }
  const view = await handle.query(replicaStatusQuery);
  const truth: RouteEntry = {
    ...claimed,
    chain,
    endpoint: view.endpoint,
    phase: view.phase,
    ...(view.revision ? { revision: view.revision } : {}),
  };
  // A sleeping replica's route is signed like a routable one: routers keep it, hold its requests
  // and wake it, and send to its endpoint as soon as the wake returns (docs/sleep.md). The phase
  // is not signed, so this binds nothing that was not signed while it was Ready.
  if (!(ROUTABLE_PHASES.includes(view.phase) || view.phase === 'Sleeping') || view.endpoint === '') return { route: truth };
  const leader = view.shards.find((s) => s.rank === 0);
  if (leader && !leader.ticket) return legacyRoute(client, truth, leader, description.memo, catalogKeyFile);
  const verdict = verifyPlacementTicket(leader?.ticket ?? '', readCatalogKeys(catalogKeyFile).all);
  if (!verdict.ok) return { refused: `${entry.replicaId}'s rank 0: ${verdict.why}` };
  const { ticket } = verdict;
  if (ticket.replicaId !== entry.replicaId || ticket.rank !== 0 || ticket.shardId !== leader?.shardId) {
    return { refused: `${entry.replicaId}'s rank 0 carries the ticket of ${ticket.replicaId} rank ${ticket.rank}` };
  }
  // A ticket is issued to one chain (placement, or a renewal before each start or adoption): one
  // carried into another chain, say by a run that continued as new into `replica` with a Ready
  // state of its own making, routes nothing.
  if (ticket.chain !== chain) {
    return {
      refused: `${entry.replicaId}'s rank 0 ticket was issued to run chain ${ticket.chain || '(none)'}, not to its live chain ${chain}`,
    };
  }
  let url: URL;
  try {
    url = new URL(view.endpoint);
  } catch {
    return { refused: `${entry.replicaId}'s endpoint ${JSON.stringify(view.endpoint)} is not a URL` };
  }
  if (url.hostname !== ticket.address) {
    return { refused: `${entry.replicaId}'s endpoint ${view.endpoint} is not on its node ${ticket.nodeId} (${ticket.address})` };
  }
  if (Number(url.port) < FIRST_UNPRIVILEGED_PORT) return { refused: `${entry.replicaId}'s endpoint ${view.endpoint} is a privileged port` };
  if (ticket.httpPort !== 0 && Number(url.port) !== ticket.httpPort) {
    return { refused: `${entry.replicaId}'s endpoint ${view.endpoint} is not on its placed port ${ticket.httpPort}` };
  }
  // The port came back from the agent unsigned: only the agent's own attestation of it counts.
  const keys = readCatalogKeys(catalogKeyFile);
  const endpoint = await checkAttestedEndpoint(client, {
    replicaId: entry.replicaId,
    chain,
    leader: leader!,
    ticket,
    url,
    catalogKeys: keys.all,
    trustUnenrolled: options.trustUnenrolled === true,
    queue,
  });
  if ('refused' in endpoint) return endpoint;
  // Revocation: a revision its deployment no longer runs, or the catalog removed or revoked, is
  // withdrawn at every router, whatever its replica says (activities/revision-liveness.ts).
  // Read once per batch: a resync signs every route of a deployment at once.
  if (!deployments.has(ticket.deployment)) {
    deployments.set(
      ticket.deployment,
      runningDeployment(client, ticket.deployment, queue).then(
        (view): DeploymentLookup => ({ view }),
        (error: unknown): DeploymentLookup => ({ unreadable: error instanceof Error ? error.message : String(error) }),
      ),
    );
  }
  const lookup = await deployments.get(ticket.deployment)!;
  if ('unreadable' in lookup) {
    // Refusing here would drop the route for good (the routes workflow applies what comes back
    // and moves on): a passing failure retries the batch instead, a lasting one refuses.
    if (activityAttempt() < DEPLOYMENT_LOOKUP_ATTEMPTS) {
      throw ApplicationFailure.retryable(`deployment ${ticket.deployment} could not be read (${lookup.unreadable}); retrying`);
    }
    return { refused: `${entry.replicaId}'s deployment ${ticket.deployment} could not be read: ${lookup.unreadable}` };
  }
  const deployment = lookup.view;
  if (!deployment) return { refused: `${entry.replicaId}'s deployment ${ticket.deployment} is not running here` };
  const revoked = revisionRefusal(deployment, ticket.revision, options.catalog?.get(), keys.all);
  if (revoked) return { route: { ...truth, phase: 'Stopped' }, withdrawn: revoked };
  // The engine's key is its start's chain's (common/engine-keys.ts): routers derive what they send from it.
  // An engine with TLS (its agent's --engine-tls) is routed over https, to the certificate its
  // agent attested and no other: the pin is signed with the route (common/engine-tls.ts).
  const tlsPin = 'tlsPin' in endpoint ? endpoint.tlsPin : undefined;
  const route: RouteEntry = {
    ...truth,
    ...(tlsPin !== undefined ? { endpoint: httpsOf(truth.endpoint), tlsPin } : {}),
    deployment: ticket.deployment,
    servedName: ticket.servedName,
    ...(ticket.keyChain ? { keyChain: ticket.keyChain } : {}),
  };
  const signed = { route: { ...route, signature: signRoute(route, keys) } };
  return endpoint.attested ? signed : { ...signed, trusted: endpoint.trusted };
}

/**
 * A replica placed by a release before placement tickets (0.2.0) carries none, and must keep its
 * traffic across the upgrade: its route is signed when its node workflow holds the leader's
 * allocation for this replica and the endpoint is on that node's registered address; the served
 * name is the one the replica workflow itself wrote in its memo. What a namespace member could
 * forge here is a node workflow of its own (docs/security.md names that gap); a signal alone
 * still moves nothing.
 */
async function legacyRoute(
  client: Client,
  truth: RouteEntry,
  leader: ShardPlacement,
  memo: Record<string, unknown> | undefined,
  catalogKeyFile: string,
): Promise<Verdict> {
  const node = await client.workflow
    .getHandle(nodeWorkflowId(leader.nodeId))
    .query(describeNodeQuery)
    .catch(() => undefined);
  const held = node?.allocations.some((a) => a.shardId === leader.shardId && a.replicaId === truth.replicaId);
  if (!node || !held)
    return { refused: `${truth.replicaId}'s rank 0 has no placement ticket and node ${leader.nodeId} holds no allocation for it` };
  let url: URL;
  try {
    url = new URL(truth.endpoint);
  } catch {
    return { refused: `${truth.replicaId}'s endpoint ${JSON.stringify(truth.endpoint)} is not a URL` };
  }
  const address = node.inventory?.managementAddress || '127.0.0.1';
  if (url.hostname !== address)
    return { refused: `${truth.replicaId}'s endpoint ${truth.endpoint} is not on its node ${leader.nodeId} (${address})` };
  if (Number(url.port) < FIRST_UNPRIVILEGED_PORT)
    return { refused: `${truth.replicaId}'s endpoint ${truth.endpoint} is a privileged port` };
  const servedName = (memo?.route as { servedName?: unknown } | undefined)?.servedName;
  const deployment = parseReplicaWorkflowId(truth.replicaId)?.deployment;
  if (typeof servedName !== 'string' || !deployment) return { refused: `${truth.replicaId} has no served name in its memo` };
  // No chain: its engine was started by a 0.2.0 agent with the fleet's engine key itself, which
  // routers send to an endpoint only when its route names no chain (common/engine-keys.ts).
  const { chain: _chain, keyChain: _keyChain, ...unchained } = truth;
  const route: RouteEntry = { ...unchained, deployment, servedName };
  return { route: { ...route, signature: signRoute(route, readCatalogKeys(catalogKeyFile)) } };
}

export function createRouteSigningActivities(
  client: Client,
  catalogKeyFile: string | undefined,
  log: (line: string) => void,
  options: RouteSigningOptions = {},
) {
  // Each unattested endpoint is said once per worker, not at every signing.
  const saidTrusted = new Set<string>();
  return {
    /**
     * Each entry as its replica's state has it, signed when routable (in order: the routes
     * workflow applies them as returned); entries that cannot be verified are left out.
     */
    async signRoutes(entries: RouteEntry[]): Promise<RouteEntry[]> {
      const out: RouteEntry[] = [];
      const deployments = new Map<string, Promise<DeploymentLookup>>();
      for (const entry of entries) {
        const verdict = await trueRoute(client, entry, catalogKeyFile, options, deployments);
        if ('refused' in verdict) {
          log(`routes: not signing a route to ${entry.endpoint || '(none)'} for ${entry.servedName}: ${verdict.refused}`);
          continue;
        }
        out.push(verdict.route);
        const unattested = `${entry.replicaId} ${verdict.route.endpoint}`;
        if (verdict.trusted && !saidTrusted.has(unattested)) {
          saidTrusted.add(unattested);
          log(`routes: signing ${verdict.route.endpoint} for ${entry.replicaId} without its agent's attestation: ${verdict.trusted}`);
        }
        if (verdict.withdrawn) log(`routes: withdrawing ${entry.replicaId} at ${entry.endpoint || '(none)'}: ${verdict.withdrawn}`);
      }
      return out;
    },
  };
}
