// The control worker signs what placement reserved: one ticket per shard, over the replica's
// workflow, node, shard, rank, GPUs, ports, the leader's registered address and the revision
// (common/placement-ticket.ts). Control side; agents start nothing without a matching ticket.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { readCatalogKeys } from '../common/catalog-key.js';
import { FailureType } from '../common/failures.js';
import { signPlacementTicket } from '../common/placement-ticket.js';
import type { PlaceRequest, PlaceResult } from './placement.js';

/** The caller's workflow, when run as an activity. */
function caller(): { workflowId: string; runId: string } | undefined {
  try {
    return Context.current().info.workflowExecution;
  } catch {
    return undefined;
  }
}

/**
 * Signs every shard of a successful placement (unchanged without a key file). The ticket names
 * the workflow that asked, not the request's replica id: a workflow cannot get a ticket for
 * another replica, and the agent accepts it only in a start that workflow sends.
 */
export function withTickets(result: PlaceResult, request: PlaceRequest, catalogKeyFile: string | undefined): PlaceResult {
  if (!result.ok || catalogKeyFile === undefined) return result;
  const run = caller();
  if (run && run.workflowId !== request.replicaId) {
    throw ApplicationFailure.nonRetryable(
      `workflow ${run.workflowId} asked to place replica ${request.replicaId}: a placement is signed only for the replica that asks`,
      FailureType.InvalidInput,
    );
  }
  const keyring = readCatalogKeys(catalogKeyFile);
  const leader = result.shards.find((s) => s.rank === 0);
  const multiNode = result.shards.length > 1;
  return {
    ok: true,
    shards: result.shards.map((shard) => ({
      ...shard,
      ticket: signPlacementTicket(
        {
          replicaId: request.replicaId,
          placedByRun: run?.runId ?? '',
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
          deployment: request.deployment,
          servedName: request.servedName ?? '',
        },
        keyring,
      ),
    })),
  };
}
