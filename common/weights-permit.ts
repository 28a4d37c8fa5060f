// Weights permits: the control worker's signature that one host may fetch one revision's weights
// now, for `llmgw weights prefetch` and a rollout's prefetch, which have no placement ticket.
// Signed by the signWeightsPermits activity only after the revision-liveness check
// (activities/weights-permits.ts), checked by the agent before it writes a byte
// (agent/weights/fetch-check.ts). Process side.
import type { CatalogKey, CatalogKeyring } from './catalog-key.js';
import { signStatement, verifyStatement } from './signature.js';

const DOMAIN = 'llmgw weights permit v1';

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

const FIELDS: (keyof WeightsPermit)[] = ['nodeId', 'revision', 'modelSource', 'issuedAt', 'expiresAt'];

function canonical(permit: WeightsPermit): string {
  return JSON.stringify(FIELDS.map((field) => [field, permit[field]]));
}

/** `<base64url JSON>.<signature>`, like a placement ticket. */
export function signWeightsPermit(permit: WeightsPermit, keyring: CatalogKeyring): string {
  return `${Buffer.from(canonical(permit), 'utf8').toString('base64url')}.${signStatement(DOMAIN, canonical(permit), keyring)}`;
}

function parse(body: string): WeightsPermit | undefined {
  try {
    const pairs = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as unknown;
    if (!Array.isArray(pairs) || pairs.length !== FIELDS.length) return undefined;
    const permit: Record<string, unknown> = {};
    for (const [index, pair] of pairs.entries()) {
      if (!Array.isArray(pair) || pair[0] !== FIELDS[index]) return undefined;
      permit[FIELDS[index]!] = pair[1];
    }
    return permit as unknown as WeightsPermit;
  } catch {
    return undefined;
  }
}

/** Why `text` does not let `nodeId` fetch `modelSource` of the revision signed `revision` at `now`, or undefined when it does. */
export function weightsPermitRefusal(
  text: string,
  keys: CatalogKey[],
  want: { nodeId: string; revision: string; modelSource: string; now: number },
): string | undefined {
  const dot = text.indexOf('.');
  const permit = dot > 0 ? parse(text.slice(0, dot)) : undefined;
  if (!permit) return 'its weights permit is malformed';
  const verdict = verifyStatement(DOMAIN, canonical(permit), text.slice(dot + 1), keys);
  if (!verdict.ok) return `its weights permit does not verify (${verdict.why})`;
  if (permit.nodeId !== want.nodeId) return `its weights permit is for node ${permit.nodeId}`;
  if (permit.revision !== want.revision) return 'its weights permit is for another revision';
  if (permit.modelSource !== want.modelSource) return `its weights permit is for ${permit.modelSource}`;
  if (want.now >= permit.expiresAt) return `its weights permit expired at ${new Date(permit.expiresAt).toISOString()}`;
  return undefined;
}
