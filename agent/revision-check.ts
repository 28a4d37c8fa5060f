// The agent's half of "only the catalog decides what runs": before a shard is started, its
// profile's signature must verify against the control worker's public keys, and its placement
// ticket must match the start (agent/placement-ticket.ts). Agent side. An agent without a key
// starts nothing unless told --insecure-unsigned.
import { ApplicationFailure } from '@temporalio/common';
import { readVerifyingKeys } from '../common/catalog-key.js';
import { FailureType } from '../common/failures.js';
import { verifyRevision } from '../common/revision-signature.js';
import type { StartShard } from '../proto/gen/llmgw/v1/shard_pb.js';
import { checkPlacementTicket } from './placement-ticket.js';

export type RevisionPolicy =
  /** Verify against the keys in this file (read on every start, so a rotated file needs no restart). */
  | { kind: 'keys'; file: string }
  /** Start anything (tests of the unsafe mode, or a lab with no key yet). */
  | { kind: 'insecure-unsigned' }
  /** No key and not told otherwise: start nothing. */
  | { kind: 'no-key' };

const HOW = 'see docs/security.md';

function refuse(spec: StartShard, why: string): ApplicationFailure {
  const profile = spec.profile;
  const what = profile ? `profile ${profile.name} of model ${profile.model || profile.servedName}` : 'a StartShard without a profile';
  return ApplicationFailure.nonRetryable(
    `agent ${spec.nodeId} refused shard ${spec.shardId} (${what}): ${why}`,
    FailureType.UnsignedRevision,
    {
      shardId: spec.shardId,
    },
  );
}

/** Throws a non-retryable UnsignedRevision failure that says why and what to do, or returns. */
export function createRevisionCheck(policy: RevisionPolicy): (spec: StartShard) => void {
  return (spec) => {
    switch (policy.kind) {
      case 'insecure-unsigned':
        return;
      case 'no-key':
        throw refuse(
          spec,
          `this agent has no catalog key, so it starts no engine. Give it the control worker's key file (--catalog-key FILE or LLMGW_CATALOG_KEY_FILE); --insecure-unsigned starts any revision, which lets anyone who can start a workflow run anything here (${HOW})`,
        );
      case 'keys':
        break;
      default: {
        const unknown: never = policy;
        throw new Error(`unknown revision policy ${JSON.stringify(unknown)}`);
      }
    }
    if (!spec.profile) throw refuse(spec, 'it has no profile');
    let keys;
    try {
      keys = readVerifyingKeys(policy.file).all;
    } catch (error) {
      throw refuse(spec, `${error instanceof Error ? error.message : String(error)}; no engine starts until the key file is readable`);
    }
    const verdict = verifyRevision(spec.profile, keys);
    // The revision may run; the ticket says whether here, on these GPUs, with this leader.
    if (verdict.ok) return checkPlacementTicket(spec, keys);
    switch (verdict.why) {
      case 'unsigned':
        throw refuse(
          spec,
          `its profile carries no catalog signature. Only revisions the control worker resolved from the catalog run here: deploy through the catalog (llmgw deploy, or deployModel), and give the control worker the same key file (--catalog-key) as this agent (${HOW})`,
        );
      case 'malformed':
        throw refuse(spec, `its profile's signature is not one the control worker makes (${HOW})`);
      case 'unknown-key':
        throw refuse(
          spec,
          `it was signed with catalog key ${verdict.keyId}, which is not in this agent's key file ${policy.file}: give the agent the control worker's current key (when rotating, add the new key to every agent before the worker signs with it; ${HOW})`,
        );
      case 'mismatch':
        throw refuse(
          spec,
          `its engine, model, args or env differ from the revision the control worker signed with key ${verdict.keyId}: it was changed after the catalog resolved it, so it is not started`,
        );
      default: {
        const unknown: never = verdict;
        throw new Error(`unknown verdict ${JSON.stringify(unknown)}`);
      }
    }
  };
}
