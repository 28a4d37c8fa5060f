// The signWeightsPermits activity, control side: a weights permit per host for a prefetch (the
// `weightsPrefetch` workflow, a rollout's fetch ahead), signed only for a revision that is live
// now: signed by the control worker with a key it still holds, its model and profile still in
// the catalog, not revoked (activities/revision-liveness.ts). The agent fetches only with a
// permit for itself or a placement ticket (agent/weights/fetch-check.ts), so a revoked revision,
// or a signature copied out of an old history, fetches nothing (docs/signed-statements.md).
import { ApplicationFailure } from '@temporalio/activity';
import type { CatalogSource } from '../catalog/watch.js';
import { readCatalogKeys } from '../common/catalog-key.js';
import { FailureType } from '../common/failures.js';
import { engineProfileFromSnapshot } from '../common/profile-conversion.js';
import type { ProfileSnapshot } from '../common/replica-types.js';
import { revisionOf } from '../common/revision.js';
import { verifyRevision } from '../common/revision-signature.js';
import { signWeightsPermit, WEIGHTS_PERMIT_TTL_MS } from '../common/weights-permit.js';
import { catalogRefusal } from './revision-liveness.js';

export interface WeightsPermitRequest {
  nodes: string[];
  /** The signed revision to fetch (as resolveDeployment returned it). */
  profile: ProfileSnapshot;
}

export function createWeightsPermitActivities(catalog: CatalogSource, catalogKeyFile: string | undefined) {
  return {
    /** node → permit; {} on a worker without a catalog key (its agents check no signature either). */
    async signWeightsPermits(request: WeightsPermitRequest): Promise<Record<string, string>> {
      if (catalogKeyFile === undefined) return {};
      const keyring = readCatalogKeys(catalogKeyFile);
      const { profile } = request;
      const refuse = (why: string): ApplicationFailure =>
        ApplicationFailure.nonRetryable(
          `no weights permit for ${profile.model} (${revisionOf(profile)}): ${why}; nothing is fetched`,
          FailureType.UnsignedRevision,
        );
      // The request is anyone's who can schedule an activity on this queue: the revision must be ours.
      const verdict = verifyRevision(engineProfileFromSnapshot(profile), keyring.all);
      if (!verdict.ok) throw refuse(`its revision does not verify (${verdict.why}), or was signed with a key no longer held`);
      const revoked = catalogRefusal(catalog.get(), profile.model, profile.profile, revisionOf(profile));
      if (revoked) throw refuse(revoked);
      const issuedAt = Date.now();
      const permits: Record<string, string> = {};
      for (const nodeId of request.nodes) {
        permits[nodeId] = signWeightsPermit(
          {
            nodeId,
            revision: profile.signature ?? '',
            modelSource: profile.modelSource,
            issuedAt,
            expiresAt: issuedAt + WEIGHTS_PERMIT_TTL_MS,
          },
          keyring,
        );
      }
      return permits;
    },
  };
}
