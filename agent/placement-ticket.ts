// The agent's half of signed placements: a start runs only where the control worker placed it
// (common/placement-ticket.ts), sent by the replica workflow it was placed for. Agent side;
// called with the revision check, before anything is written or spawned.
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { CatalogKey } from '../common/catalog-key.js';
import { FailureType } from '../common/failures.js';
import { ticketMismatches, verifyPlacementTicket } from '../common/placement-ticket.js';
import type { StartShard } from '../proto/gen/llmgw/v1/shard_pb.js';

/** The workflow whose startShard this is, when called as an activity (undefined otherwise). */
function callingWorkflow(): string | undefined {
  try {
    return Context.current().info.workflowExecution?.workflowId;
  } catch {
    return undefined;
  }
}

/** Throws the non-retryable PlacementRefused failure naming every reason, or returns. */
export function checkPlacementTicket(spec: StartShard, keys: CatalogKey[]): void {
  const verdict = verifyPlacementTicket(spec.placementTicket, keys);
  const problems = verdict.ok ? ticketMismatches(verdict.ticket, spec, callingWorkflow()) : [verdict.why];
  if (problems.length === 0) return;
  throw ApplicationFailure.nonRetryable(
    `agent ${spec.nodeId} refused shard ${spec.shardId} of ${spec.replicaId}: ${problems.join('; ')} (see docs/security.md)`,
    FailureType.PlacementRefused,
    { shardId: spec.shardId, problems },
  );
}
