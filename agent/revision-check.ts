// The agent's half of "only the catalog decides what runs": before a shard is started, its
// profile's signature must verify against the control worker's public keys, and its placement
// ticket must match the start (agent/placement-ticket.ts). Agent side. An agent without a key
// starts nothing unless told --insecure-unsigned.
import { ApplicationFailure } from '@temporalio/common';
import { readVerifyingKeys, type CatalogKey } from '../common/catalog-key.js';
import { FailureType } from '../common/failures.js';
import { verifyRevision } from '../common/revision-signature.js';
import type { EngineProfile, StartShard } from '../proto/gen/llmgw/v1/shard_pb.js';
import { checkPlacementTicket, type TicketFacts } from './placement-ticket.js';

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

/** What a start is checked with: the spec, and whether no engine of its shard is recorded here. */
export type RevisionCheck = (spec: StartShard, start: { newStart: boolean }) => Promise<void>;

/**
 * Rejects with a non-retryable UnsignedRevision failure that says why and what to do, or
 * PlacementRefused for a ticket that does not hold here (`facts`: this agent's own address and
 * its Temporal client; absent, those are not checked).
 */
export function createRevisionCheck(policy: RevisionPolicy, facts?: TicketFacts): RevisionCheck {
  return async (spec, { newStart }) => {
    if (policy.kind === 'insecure-unsigned') return;
    if (!spec.profile) throw refuse(spec, 'it has no profile');
    const checked = checkRevision(policy, spec.profile);
    if (typeof checked === 'string') throw refuse(spec, checked);
    // The revision may run; the ticket says whether here, on these GPUs, with this leader.
    if (checked) await checkPlacementTicket(spec, checked, facts, newStart);
  };
}

/**
 * Whether `profile` is a revision the control worker signed: the keys it verifies with, or why
 * not (with what to do), or undefined under --insecure-unsigned. Shared by the start and the
 * fetch of weights (agent/weights/fetch-check.ts), which must both be for a signed revision.
 */
export function checkRevision(policy: RevisionPolicy, profile: EngineProfile): CatalogKey[] | string | undefined {
  switch (policy.kind) {
    case 'insecure-unsigned':
      return undefined;
    case 'no-key':
      return `this agent has no catalog key, so it starts no engine. Give it the control worker's key file (--catalog-key FILE or LLMGW_CATALOG_KEY_FILE); --insecure-unsigned starts any revision, which lets anyone who can start a workflow run anything here (${HOW})`;
    case 'keys':
      break;
    default: {
      const unknown: never = policy;
      throw new Error(`unknown revision policy ${JSON.stringify(unknown)}`);
    }
  }
  let keys;
  try {
    keys = readVerifyingKeys(policy.file).all;
  } catch (error) {
    return `${error instanceof Error ? error.message : String(error)}; no engine starts until the key file is readable`;
  }
  const verdict = verifyRevision(profile, keys);
  if (verdict.ok) return keys;
  switch (verdict.why) {
    case 'unsigned':
      return `its profile carries no catalog signature. Only revisions the control worker resolved from the catalog run here: deploy through the catalog (llmgw deploy, or deployModel), and give the control worker the same key file (--catalog-key) as this agent (${HOW})`;
    case 'malformed':
      return `its profile's signature is not one the control worker makes (${HOW})`;
    case 'unknown-key':
      return `it was signed with catalog key ${verdict.keyId}, which is not in this agent's key file ${policy.file}: give the agent the control worker's current key (when rotating, add the new key to every agent before the worker signs with it; ${HOW})`;
    case 'mismatch':
      return `its engine, model, args or env differ from the revision the control worker signed with key ${verdict.keyId}: it was changed after the catalog resolved it, so it is not started`;
    default: {
      const unknown: never = verdict;
      throw new Error(`unknown verdict ${JSON.stringify(unknown)}`);
    }
  }
}
