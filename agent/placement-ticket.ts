// The agent's half of signed placements: a start runs only where the control worker placed it
// (common/placement-ticket.ts): on this host's own address, sent by the replica workflow and run
// chain it was placed for, and, for an engine not yet recorded here, on a fresh ticket. Agent
// side; called with the revision check, before anything is written or spawned.
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { CatalogKey } from '../common/catalog-key.js';
import { FailureType } from '../common/failures.js';
import { ticketMismatches, verifyPlacementTicket, type StartFacts } from '../common/placement-ticket.js';
import type { StartShard } from '../proto/gen/llmgw/v1/shard_pb.js';

/** What the agent knows of itself that a ticket must agree with. */
export interface TicketFacts {
  /** The agent's advertised address (--advertise-addr): where its engines are reached. */
  ownAddress: string;
  /** The agent's Temporal client (undefined while not connected): asked for the caller's run chain. */
  client: () => Client | undefined;
}

/** The workflow execution whose startShard this is, when called as an activity (undefined otherwise). */
function callingExecution(): { workflowId: string; runId: string } | undefined {
  try {
    return Context.current().info.workflowExecution;
  } catch {
    return undefined;
  }
}

/**
 * The caller's run chain as Temporal records it: the start says nothing the agent believes
 * about who sent it, and a run continued as new keeps its chain's first run id.
 */
async function callerOf(facts: TicketFacts | undefined): Promise<StartFacts['caller']> {
  const execution = callingExecution();
  if (!execution || !facts) return undefined;
  const client = facts.client();
  if (!client) throw ApplicationFailure.retryable('not connected to Temporal yet: cannot tell which run chain sent this start');
  const description = await client.workflow.getHandle(execution.workflowId, execution.runId).describe();
  const chain = description.raw.workflowExecutionInfo?.firstRunId || execution.runId;
  return { workflowId: execution.workflowId, chain };
}

/** Throws the non-retryable PlacementRefused failure naming every reason, or returns. */
export async function checkPlacementTicket(
  spec: StartShard,
  keys: CatalogKey[],
  facts: TicketFacts | undefined,
  newStart: boolean,
): Promise<void> {
  const verdict = verifyPlacementTicket(spec.placementTicket, keys);
  const problems = verdict.ok
    ? ticketMismatches(verdict.ticket, spec, {
        caller: await callerOf(facts),
        ...(facts ? { ownAddress: facts.ownAddress } : {}),
        newStart,
        now: Date.now(),
      })
    : [verdict.why];
  if (problems.length === 0) return;
  throw ApplicationFailure.nonRetryable(
    `agent ${spec.nodeId} refused shard ${spec.shardId} of ${spec.replicaId}: ${problems.join('; ')} (see docs/security.md)`,
    FailureType.PlacementRefused,
    { shardId: spec.shardId, problems },
  );
}
