// The agent's check before it fetches weights: a fetch is for a revision the control worker
// signed, whose source is the one asked for, exactly as a start must be (agent/revision-check.ts).
// Without it any workflow in the namespace (a hand-started replica, or one that schedules
// fetchWeights on `agent/<node>` itself) had this host pull any repository or prefix its
// credentials reach into the cache, evicting what no shard uses. Agent side.
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../common/failures.js';
import { engineProfileFromSnapshot } from '../../common/profile-conversion.js';
import { checkRevision, type RevisionPolicy } from '../revision-check.js';
import type { FetchWeightsInput } from './activity.js';

/** Throws a non-retryable UnsignedRevision failure that says why and what to do, or returns. */
export function createFetchCheck(policy: RevisionPolicy, nodeId = 'this host'): (input: FetchWeightsInput) => void {
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
  };
}
