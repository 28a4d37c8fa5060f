// Weights permits: the control worker's signature that one host may fetch one revision's weights
// now, for `llmgw weights prefetch` and a rollout's prefetch, which have no placement ticket.
// Signed by the signWeightsPermits activity only after the revision-liveness check
// (activities/weights-permits.ts), checked by the agent before it writes a byte
// (agent/weights/fetch-check.ts). Process side.
import type { CatalogKey, CatalogKeyring } from './catalog-key.js';
import { openingProblem, openStatement, signedStatement, windowProblems, type StatementForm } from './signed-statement.js';

/** How long a permit lets its host start (or resume) the fetch: a rerun of the prefetch signs anew. */
export const WEIGHTS_PERMIT_TTL_MS = 60 * 60_000;

/**
 * A placement ticket lets its node fetch its revision for at most this long after it was issued
 * or renewed: the replica's fetch step follows placement at once, and its retries (an agent
 * restarted mid-fetch) resume within the fetch's own 24-hour limit.
 */
export const FETCH_TICKET_MAX_AGE_MS = 24 * 3600_000;

export interface WeightsPermit {
  nodeId: string;
  /** The revision's signature: the permit holds only for the revision it was signed for. */
  revision: string;
  modelSource: string;
  /** ms since the epoch. */
  issuedAt: number;
  expiresAt: number;
}

const FORM: StatementForm<WeightsPermit> = {
  domain: 'llmgw weights permit v1',
  fields: ['nodeId', 'revision', 'modelSource', 'issuedAt', 'expiresAt'],
};

/** `<base64url JSON>.<signature>`, like a placement ticket. */
export function signWeightsPermit(permit: WeightsPermit, keyring: CatalogKeyring): string {
  return signedStatement(FORM, permit, keyring);
}

/** Why `text` does not let `nodeId` fetch `modelSource` of the revision signed `revision` at `now`, or undefined when it does. */
export function weightsPermitRefusal(
  text: string,
  keys: CatalogKey[],
  want: { nodeId: string; revision: string; modelSource: string; now: number },
): string | undefined {
  const opened = openStatement(FORM, text, keys);
  if (!opened.ok) return openingProblem(opened, 'its weights permit');
  const permit = opened.statement;
  if (permit.nodeId !== want.nodeId) return `its weights permit is for node ${permit.nodeId}`;
  if (permit.revision !== want.revision) return 'its weights permit is for another revision';
  if (permit.modelSource !== want.modelSource) return `its weights permit is for ${permit.modelSource}`;
  return windowProblems(permit.issuedAt, { now: want.now, expiresAt: permit.expiresAt }, 'its weights permit')[0];
}
