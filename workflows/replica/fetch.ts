// The replica's fetch step, between placement and start: each host the replica was placed on
// makes the pinned revision complete in its cache (fetchWeights on the host's queue, which
// heartbeats its progress), all hosts at once. A source llmgw does not fetch (file://,
// engine://, a hub id a revision of 0.2.0 carries unpinned) skips it. Workflow side; the
// `fetch` step of steps.ts.
import { ActivityCancellationType, CancellationScope, condition, isCancellation } from '@temporalio/workflow';
import { ActivityFailure, ApplicationFailure } from '@temporalio/common';
import type { AgentActivities } from '../../agent/activity-types.js';
import { FailureType } from '../../common/failures.js';
import { formatModelSource, isFetchedByLlmgw, modelSourceOf } from '../../common/model-source.js';
import type { ReplicaContext } from './context.js';
import { failureOutcome, firstLine, type Outcome } from './state.js';
import { AGENT_RETRY, agentActivities } from '../toolkit.js';

// A fetch that heartbeats nothing for this long is taken for a dead agent and retried (it
// resumes). The SDK sends heartbeats at most every 0.8 of it: progress in the UI every 8 s.
const FETCH_HEARTBEAT_SECONDS = 10;

/** The host's fetchWeights (and its other node-local activities) as a fetch calls them: heartbeats watched, retried to resume. */
export function fetchOn(nodeId: string, summary: string, timeoutSeconds: number): AgentActivities {
  return agentActivities(nodeId, summary, {
    startToCloseTimeout: `${timeoutSeconds} seconds`,
    heartbeatTimeout: `${FETCH_HEARTBEAT_SECONDS} seconds`,
    // A cut connection or a restarted agent: the next try resumes from the bytes on disk.
    retry: { ...AGENT_RETRY, maximumAttempts: 10, maximumInterval: '30 seconds' },
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  });
}

/** Fetches the replica's weights onto every host it was placed on; 'fetched' when all hold them. */
export async function fetchWeights(run: ReplicaContext, options: { timeoutSeconds?: number } = {}): Promise<Outcome | 'fetched'> {
  const source = modelSourceOf(run.profile.modelSource);
  if (!isFetchedByLlmgw(source)) return 'fetched';
  const nodes = [...new Set(run.state.shards.map((s) => s.nodeId))].sort();
  const what = formatModelSource(source);
  void run.setPhase('Fetching', `fetching ${what} onto ${nodes.join(', ')} (progress: the fetchWeights activities' details)`);
  const scope = new CancellationScope();
  const lost = (): string | undefined =>
    nodes.find((n) => run.events.some((e) => e.kind === 'node' && e.status.nodeId === n && e.status.phase === 'Lost'));
  let settled = false;
  void condition(() => settled || run.stopRequested() || lost() !== undefined).then(() => {
    if (!settled) scope.cancel();
  });
  const timeoutSeconds = options.timeoutSeconds ?? 24 * 3600;
  const results = await scope
    .run(() =>
      Promise.allSettled(
        nodes.map((nodeId) =>
          fetchOn(nodeId, `fetchWeights ${what} on ${nodeId}`, timeoutSeconds).fetchWeights({
            modelSource: run.profile.modelSource,
            replicaId: run.replicaId,
            // The signed revision and this host's placement ticket (signed only for a live
            // revision): the agent fetches only with both (agent/weights/fetch-check.ts).
            profile: run.profile,
            ...ticketOn(run, nodeId),
          }),
        ),
      ),
    )
    .finally(() => (settled = true));
  if (run.stopRequested()) return { kind: 'stop' };
  const gone = lost();
  if (gone !== undefined)
    return { kind: 'replace', reason: `the agent on ${gone} was lost while fetching weights`, nodeId: gone, agentGone: true };
  for (const [i, result] of results.entries()) {
    if (result.status === 'fulfilled') continue;
    const nodeId = nodes[i]!;
    const error: unknown = result.reason;
    if (isCancellation(error)) throw error;
    const cause = error instanceof ActivityFailure ? error.cause : error;
    if (cause instanceof ApplicationFailure && cause.type === FailureType.WeightsNoSpace) {
      // This host cannot hold them; another may.
      return { kind: 'replace', reason: `fetching weights on ${nodeId}: ${firstLine(cause.message)}`, nodeId, agentGone: false };
    }
    if (cause instanceof ApplicationFailure && cause.type === FailureType.WeightsUnavailable) {
      return { kind: 'fail', reason: `fetching weights on ${nodeId}: ${firstLine(cause.message)}` };
    }
    return failureOutcome(error, nodeId, `fetching weights on ${nodeId}`);
  }
  return 'fetched';
}

/** The placement ticket of the replica's shard on `nodeId`, when placement signed one. */
function ticketOn(run: ReplicaContext, nodeId: string): { ticket?: string } {
  const ticket = run.state.shards.find((s) => s.nodeId === nodeId && s.ticket)?.ticket;
  return ticket ? { ticket } : {};
}
