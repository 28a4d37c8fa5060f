// The agent's check before it fetches weights: a fetch is for a revision the control worker
// signed, whose source is the one asked for, exactly as a start must be (agent/revision-check.ts).
// Without it any workflow in the namespace (a hand-started replica, or one that schedules
// fetchWeights on `agent/<node>` itself) had this host pull any repository or prefix its
// credentials reach into the cache, evicting what no shard uses. And a signature alone never
// expires, so a fetch also carries a fresh word that the revision is live: its placement ticket
// for this node (signed only for a live revision), or a weights permit for this node signed after
// the liveness check (common/weights-permit.ts); a revoked revision fetches nothing. Agent side.
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../common/failures.js';
import type { CatalogKey } from '../../common/catalog-key.js';
import { verifyPlacementTicket } from '../../common/placement-ticket.js';
import { FETCH_TICKET_MAX_AGE_MS, weightsPermitRefusal } from '../../common/weights-permit.js';
import { engineProfileFromSnapshot } from '../../common/profile-conversion.js';
import { checkRevision, type RevisionPolicy } from '../revision-check.js';
import type { FetchWeightsInput } from './activity.js';

/** Throws a non-retryable UnsignedRevision failure that says why and what to do, or returns. */
export function createFetchCheck(
  policy: RevisionPolicy,
  nodeId = 'this host',
  now: () => number = Date.now,
): (input: FetchWeightsInput) => void {
  return (input) => {
    if (policy.kind === 'insecure-unsigned') return;
    const refuse = (why: string): ApplicationFailure =>
      ApplicationFailure.nonRetryable(
        `agent ${nodeId} refused to fetch ${input.modelSource} for ${input.replicaId}: ${why}`,
        FailureType.UnsignedRevision,
      );
    if (!input.profile) {
      throw refuse(
        'the fetch carries no signed revision. Weights are fetched only for a revision the control worker resolved from the catalog: deploy, roll out or prefetch through llmgw (see docs/security.md)',
      );
    }
    if (input.profile.modelSource !== input.modelSource) {
      throw refuse(`the signed revision it carries names another source (${input.profile.modelSource})`);
    }
    const checked = checkRevision(policy, engineProfileFromSnapshot(input.profile));
    if (typeof checked === 'string') throw refuse(checked);
    if (checked) {
      const stale = liveRefusal(input, checked, nodeId, now());
      if (stale) throw refuse(stale);
    }
  };
}

/** Why nothing the fetch carries says its revision is live for this node now, or undefined. */
function liveRefusal(input: FetchWeightsInput, keys: CatalogKey[], nodeId: string, now: number): string | undefined {
  const revision = input.profile?.signature ?? '';
  if (input.ticket) {
    const verdict = verifyPlacementTicket(input.ticket, keys);
    if (!verdict.ok) return verdict.why;
    const { ticket } = verdict;
    if (ticket.nodeId !== nodeId) return `its placement ticket is for node ${ticket.nodeId}`;
    if (ticket.revision !== revision) return 'its placement ticket is for another revision';
    if (now - ticket.issuedAt > FETCH_TICKET_MAX_AGE_MS)
      return `its placement ticket was issued ${new Date(ticket.issuedAt).toISOString()}, too long ago`;
    return undefined;
  }
  if (input.permit) return weightsPermitRefusal(input.permit, keys, { nodeId, revision, modelSource: input.modelSource, now });
  return 'it carries neither a placement ticket nor a weights permit for this node, so nothing says its revision is still live (a revision the catalog revoked gets neither): fetch through llmgw (deploy, rollout, or weights prefetch)';
}
