// The control worker signs what placement reserved: one ticket per shard, over the replica's
// workflow and run chain, node, shard, rank, GPUs, ports, the leader's registered address, the
// revision and the time (common/placement-ticket.ts), and renews them before each start. Control
// side; agents start nothing without a matching ticket. What a ticket names is resolved here,
// never taken from the request: the replica and its chain from Temporal, the deployment from
// the replica's id, the served name from that deployment's own workflow.
import { Context } from '@temporalio/activity';
import { ApplicationFailure, type Client } from '@temporalio/client';
import type { CatalogSource } from '../catalog/watch.js';
import { readCatalogKeys, type CatalogKey } from '../common/catalog-key.js';
import { FailureType } from '../common/failures.js';
import { nodeWorkflowId, parseReplicaWorkflowId } from '../common/names.js';
import { keyChainOf } from '../common/engine-keys.js';
import { signPlacementTicket, verifyPlacementTicket, type PlacementTicket } from '../common/placement-ticket.js';
import type { ShardPlacement } from '../common/replica-types.js';
import type { DeploymentView } from '../common/replica-types.js';
import { describeNodeQuery } from '../workflows/definitions.js';
import { enrollmentProblem } from '../common/agent-identity.js';
import type { NodeView } from '../common/node-types.js';
import type { PlaceRequest, PlaceResult } from './placement.js';
import { revisionRefusal, runningDeployment } from './revision-liveness.js';

/** The calling replica: its workflow, run and run chain as Temporal has them (undefined outside an activity). */
interface Caller {
  workflowId: string;
  runId: string;
  chain: string;
  taskQueue: string;
}

async function callerOf(client: Client): Promise<Caller | undefined> {
  let info;
  try {
    info = Context.current().info;
  } catch {
    return undefined;
  }
  const execution = info.workflowExecution;
  if (!execution) return undefined;
  const description = await client.workflow.getHandle(execution.workflowId, execution.runId).describe();
  const chain = description.raw.workflowExecutionInfo?.firstRunId || execution.runId;
  return { ...execution, chain, taskQueue: info.taskQueue };
}

/** What a revision is checked against: the worker's live catalog and its keys (read when asked). */
interface Liveness {
  catalog: CatalogSource | undefined;
  keys: () => CatalogKey[];
}

function liveness(catalogKeyFile: string, catalog: CatalogSource | undefined): Liveness {
  return { catalog, keys: () => readCatalogKeys(catalogKeyFile).all };
}

function refuse(message: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(message, FailureType.PlacementRefused);
}

/**
 * The deployment and served name a replica's tickets name: the deployment is the one in the
 * replica's own workflow id, the served name that deployment's (a running deployModel on this
 * worker's queue). A request naming another deployment or another served name, or a revision
 * that is not live (activities/revision-liveness.ts), signs nothing.
 */
async function resolveNames(
  client: Client,
  request: PlaceRequest,
  caller: Caller | undefined,
  live: Liveness,
): Promise<{ deployment: string; servedName: string }> {
  const deployment = parseReplicaWorkflowId(request.replicaId)?.deployment;
  if (!deployment) throw refuse(`${request.replicaId} is not a replica workflow id: nothing is placed for it`);
  if (request.deployment !== deployment) {
    throw refuse(
      `replica ${request.replicaId} asked to be placed for deployment ${request.deployment}: a replica is placed for its own deployment only`,
    );
  }
  const view = await runningDeployment(client, deployment, caller?.taskQueue);
  if (!view) {
    throw refuse(
      `replica ${request.replicaId}'s deployment ${deployment} is not a running deployment of this control plane: nothing is placed for it`,
    );
  }
  if (request.servedName !== undefined && request.servedName !== view.servedName) {
    throw refuse(
      `replica ${request.replicaId} asked for served name ${JSON.stringify(request.servedName)}, but deployment ${deployment} serves ${JSON.stringify(view.servedName)}: nothing is signed`,
    );
  }
  const revoked = revisionRefusal(view, request.revision ?? '', live.catalog?.get(), live.keys());
  if (revoked) throw refuse(`replica ${request.replicaId}: ${revoked}: nothing is placed for it`);
  return { deployment, servedName: view.servedName };
}

/** What the tickets of one placement name besides the shards: resolved before any GPU is reserved. */
export interface TicketNames {
  deployment: string;
  servedName: string;
  run: Caller | undefined;
}

/**
 * Who asks and for what, resolved before placement reserves anything (undefined without a key
 * file: nothing is signed). The ticket names the workflow that asked and its run chain, not the
 * request's replica id: a workflow cannot get a ticket for another replica, and the agent
 * accepts it only in a start that chain sends.
 */
export async function ticketNames(
  client: Client,
  request: PlaceRequest,
  catalogKeyFile: string | undefined,
  catalog?: CatalogSource,
): Promise<TicketNames | undefined> {
  if (catalogKeyFile === undefined) return undefined;
  const run = await callerOf(client);
  if (run && run.workflowId !== request.replicaId) {
    throw ApplicationFailure.nonRetryable(
      `workflow ${run.workflowId} asked to place replica ${request.replicaId}: a placement is signed only for the replica that asks`,
      FailureType.InvalidInput,
    );
  }
  return { ...(await resolveNames(client, request, run, liveness(catalogKeyFile, catalog))), run };
}

const LEADER_VIEW_TRIES = 4;

/** The rank 0 node's view did not answer: its enrollment, and so the tickets' leader key, is unknown. */
export class LeaderUnreadable extends Error {
  constructor(readonly nodeId: string) {
    super(
      `the view of ${nodeId}, the placement's rank 0, did not answer: its agent key is unknown, so no ticket is signed; placement is retried`,
    );
  }
}

/**
 * A multi-node placement's rank 0 agent key, when its node's enrollment is the operator's (checked
 * against the catalog key): the tickets name it, and worker ranks then join only the rendezvous
 * port that agent signed for. Undefined for an unenrolled leader, whose gang starts as before.
 */
export async function enrolledLeaderKey(
  result: PlaceResult,
  describe: (nodeId: string) => Promise<NodeView | undefined>,
  catalogKeyFile: string | undefined,
): Promise<string | undefined> {
  if (!result.ok || result.shards.length < 2 || catalogKeyFile === undefined) return undefined;
  const leader = result.shards.find((s) => s.rank === 0);
  if (!leader) return undefined;
  // A view that does not answer is not "unenrolled": leaving the key out would let worker ranks
  // join any port. A few tries, then the caller gives the GPUs back and placement is retried.
  let view: NodeView | undefined;
  for (let attempt = 1; attempt <= LEADER_VIEW_TRIES && view === undefined; attempt++) {
    if (attempt > 1) await new Promise((resolve) => setTimeout(resolve, 500));
    view = await describe(leader.nodeId);
  }
  if (view === undefined) throw new LeaderUnreadable(leader.nodeId);
  const enrollment = view.enrollment;
  if (!enrollment) return undefined;
  return enrollmentProblem(leader.nodeId, enrollment, readCatalogKeys(catalogKeyFile).all) ? undefined : enrollment.publicKey;
}

/** Signs every shard of a successful placement (unchanged when `names` is undefined: no key file). */
export function withTickets(
  result: PlaceResult,
  request: PlaceRequest,
  names: TicketNames | undefined,
  catalogKeyFile: string | undefined,
  leaderKey?: string,
): PlaceResult {
  if (!result.ok || names === undefined || catalogKeyFile === undefined) return result;
  const { run } = names;
  const keyring = readCatalogKeys(catalogKeyFile);
  const leader = result.shards.find((s) => s.rank === 0);
  const multiNode = result.shards.length > 1;
  const issuedAt = Date.now();
  return {
    ok: true,
    shards: result.shards.map((shard) => ({
      ...shard,
      ticket: signPlacementTicket(
        {
          replicaId: request.replicaId,
          placedByRun: run?.runId ?? '',
          chain: run?.chain ?? '',
          issuedAt,
          shardId: shard.shardId,
          nodeId: shard.nodeId,
          rank: shard.rank,
          nnodes: result.shards.length,
          gpus: shard.gpuIndices,
          hcas: shard.hcas,
          httpPort: shard.httpPort,
          leaderAddress: multiNode ? (leader?.managementAddress ?? '') : '',
          leaderNode: multiNode ? (leader?.nodeId ?? '') : '',
          revision: request.revision ?? '',
          address: shard.managementAddress,
          deployment: names.deployment,
          servedName: names.servedName,
          peers: multiNode ? [...result.shards].sort((a, b) => a.rank - b.rank).map((s) => s.managementAddress) : [],
          ...(multiNode && leaderKey ? { leaderKey } : {}),
        },
        keyring,
      ),
    })),
  };
}

/**
 * Before a start: the shards' tickets signed again, now and for the calling run's chain. A
 * ticket of the caller's own chain is renewed as it is. One of another chain is renewed only
 * while its node still holds the shard's GPUs for this replica: a replica rebuilt around running
 * engines (adoption, a new chain) keeps them, while a replica id used again after its replica
 * ended (whose GPUs were given back) gets nothing from the old tickets. Shards without a ticket
 * (placed before tickets, or without a key) come back unchanged.
 */
export async function renewTickets(
  client: Client,
  shards: ShardPlacement[],
  catalogKeyFile: string | undefined,
  catalog?: CatalogSource,
): Promise<ShardPlacement[]> {
  if (catalogKeyFile === undefined || !shards.some((s) => s.ticket)) return shards;
  const caller = await callerOf(client);
  const keyring = readCatalogKeys(catalogKeyFile);
  const deployments = new Map<string, DeploymentView | undefined>();
  const out: ShardPlacement[] = [];
  for (const shard of shards) {
    if (!shard.ticket) {
      out.push(shard);
      continue;
    }
    const verdict = verifyPlacementTicket(shard.ticket, keyring.all);
    if (!verdict.ok) throw refuse(`shard ${shard.shardId}: ${verdict.why}`);
    const { ticket } = verdict;
    if (caller && caller.workflowId !== ticket.replicaId) {
      throw refuse(
        `workflow ${caller.workflowId} asked to renew replica ${ticket.replicaId}'s ticket: a ticket is renewed only for its replica`,
      );
    }
    if (ticket.shardId !== shard.shardId || ticket.nodeId !== shard.nodeId) {
      throw refuse(`shard ${shard.shardId} on ${shard.nodeId} carries the ticket of shard ${ticket.shardId} on ${ticket.nodeId}`);
    }
    if (caller && caller.chain !== ticket.chain && !(await nodeHolds(client, ticket.nodeId, ticket.shardId, ticket.replicaId))) {
      throw refuse(
        `shard ${shard.shardId}'s ticket is run chain ${ticket.chain}'s, not ${caller.chain}'s, and node ${ticket.nodeId} no longer holds its GPUs for ${ticket.replicaId}: it must be placed again`,
      );
    }
    // A restart or an adoption is a start too: only of a revision that is still live.
    if (!deployments.has(ticket.deployment)) {
      deployments.set(ticket.deployment, await runningDeployment(client, ticket.deployment, caller?.taskQueue));
    }
    const view = deployments.get(ticket.deployment);
    const revoked = view
      ? revisionRefusal(view, ticket.revision, catalog?.get(), keyring.all)
      : `its deployment ${ticket.deployment} is not a running deployment of this control plane`;
    if (revoked) throw refuse(`shard ${shard.shardId} of ${ticket.replicaId}: ${revoked}: its ticket is not renewed`);
    const chain = caller?.chain ?? ticket.chain;
    // The engines keep the key of the chain that started them (common/engine-keys.ts): a ticket
    // renewed into another chain says which, so that its route and a restart use that key.
    const keyChain = keyChainOf(ticket);
    const { keyChain: _previous, ...rest } = ticket;
    const renewed: PlacementTicket = {
      ...rest,
      placedByRun: caller?.runId ?? ticket.placedByRun,
      chain,
      issuedAt: Date.now(),
      ...(keyChain !== undefined && keyChain !== chain ? { keyChain } : {}),
    };
    out.push({ ...shard, ticket: signPlacementTicket(renewed, keyring) });
  }
  return out;
}

async function nodeHolds(client: Client, nodeId: string, shardId: string, replicaId: string): Promise<boolean> {
  const view = await client.workflow.getHandle(nodeWorkflowId(nodeId)).query(describeNodeQuery);
  return view.allocations.some((a) => a.shardId === shardId && a.replicaId === replicaId);
}
