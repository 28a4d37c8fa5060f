// Who may stop an engine here: the agent's half of "a namespace member cannot stop what runs"
// (docs/signed-statements.md, "Stops come from the placement's run"). Anyone who can write to
// the namespace can schedule stopShard on `agent/<node>` from a workflow of their own; the agent
// stops a shard it runs under a placement ticket only for the replica run chain that ticket names,
// or for reconcileNode running on the control worker's own queue (our code, acting on a survey
// this agent signed). Agent side, asked before the supervisor touches anything.
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { FailureType } from '../common/failures.js';
import { CONTROL_TASK_QUEUE, WorkflowType } from '../common/names.js';
import { readPlacementTicket, type PlacementTicket } from '../common/placement-ticket.js';

/** The calling run as Temporal records it: nothing in the request says who sent it. */
export interface StopCaller {
  workflowId: string;
  workflowType: string;
  taskQueue: string;
  /** The run chain: its first run's id (kept across continue-as-new). */
  chain: string;
}

export interface StopCheckDeps {
  /** The placement ticket the shard was started under, as recorded here ('' or undefined: none). */
  ticketOf(shardId: string): string | undefined;
  /** The agent's Temporal client (undefined while not connected). */
  client(): Client | undefined;
}

/** Throws the non-retryable StopRefused failure, or returns when `caller` may stop `shardId`. */
export type StopCheck = (shardId: string) => Promise<void>;

/** Why `caller` may not stop a shard placed under `ticketText`, or undefined when it may. */
export function stopRefusal(shardId: string, ticketText: string | undefined, caller: StopCaller | undefined): string | undefined {
  // No ticket: an engine placed by a 0.2.0 control worker (or nothing recorded): as before.
  const ticket = ticketText ? readPlacementTicket(ticketText) : undefined;
  if (!ticket || !caller) return undefined;
  const ours = caller.taskQueue === CONTROL_TASK_QUEUE;
  if (caller.workflowType === WorkflowType.reconcileNode && ours) return undefined;
  if (caller.workflowId !== ticket.replicaId) return refusal(shardId, ticket, caller);
  // The run chain that placed it, which is what sent its start (workflow code of ours or not).
  if (caller.chain === ticket.chain) return undefined;
  // A replica rebuilt around the engine under the same id (reconcile-rebuild.ts) is another
  // chain, and its engines keep the ticket they started with: our replica code on our queue,
  // which the id is not free for while the replica that placed the engine runs.
  if (caller.workflowType === WorkflowType.replica && ours) return undefined;
  return refusal(shardId, ticket, caller);
}

function refusal(shardId: string, ticket: PlacementTicket, caller: StopCaller): string {
  return (
    `shard ${shardId} was placed for run chain ${ticket.chain} of ${ticket.replicaId}; only that replica ` +
    `(or its rebuild on task queue ${CONTROL_TASK_QUEUE}) or reconcileNode on ${CONTROL_TASK_QUEUE} may stop it, and it was asked by ` +
    `${caller.workflowType} ${caller.workflowId} (chain ${caller.chain}) on task queue ${caller.taskQueue} (see docs/security.md)`
  );
}

async function callingRun(deps: StopCheckDeps): Promise<StopCaller | undefined> {
  let execution: { workflowId: string; runId: string } | undefined;
  try {
    execution = Context.current().info.workflowExecution;
  } catch {
    return undefined; // not an activity (the admin socket, tests of the supervisor)
  }
  if (!execution) return undefined;
  const client = deps.client();
  if (!client) throw ApplicationFailure.retryable('not connected to Temporal yet: cannot tell which run asks to stop this shard');
  const description = await client.workflow.getHandle(execution.workflowId, execution.runId).describe();
  return {
    workflowId: execution.workflowId,
    workflowType: description.type,
    taskQueue: description.taskQueue,
    chain: description.raw.workflowExecutionInfo?.firstRunId || execution.runId,
  };
}

export function createStopCheck(deps: StopCheckDeps): StopCheck {
  return async (shardId) => {
    const ticket = deps.ticketOf(shardId);
    // Nothing to vouch for: no describe call, the stop goes on as before.
    if (!ticket || !readPlacementTicket(ticket)) return;
    const why = stopRefusal(shardId, ticket, await callingRun(deps));
    if (why) throw ApplicationFailure.nonRetryable(`stop refused: ${why}`, FailureType.StopRefused, { shardId });
  };
}
