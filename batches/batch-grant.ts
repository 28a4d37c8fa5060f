// A batch's grant: what the router that created it (POST /v1/batches) allowed it, written into
// the file store before its workflow starts and read back by the control worker's batch
// activities, which act only on it. Router and control side alike. The namespace is not a trust
// boundary (docs/security.md): anyone in it can start a `batch` workflow with any owner and
// scope, but only a router or a control worker can write the store, so the grant, not the
// workflow's input, says whose batch it is, what it may run, and until when.
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { BATCH_ENDPOINTS, chunkOwner, grantFileId, isBatchId, type BatchScope } from './batch-lines.js';
import { putBatchFile, type FileStore } from './file-store.js';
import { BATCH_NOT_GRANTED, BATCH_WINDOW_ENDED } from '../activities/batch-not-configured.js';

/** A grant is a few hundred bytes; a long scope list may make it some kilobytes. More is not one of ours. */
const MAX_GRANT_BYTES = 1024 * 1024;

const Names = z.union([z.literal('all'), z.array(z.string())]);

/** Read back from a store others' programs could reach: parsed, never trusted as it comes. */
export const BatchGrant = z.object({
  batchId: z.string().refine(isBatchId, 'not a batch id'),
  inputFileId: z.string(),
  endpoint: z.enum(BATCH_ENDPOINTS),
  /** The creating API key's id; null when the router had no keys. */
  owner: z.string().nullable(),
  /** The creating key's model and adapter names (as the workflow input has them); null: every model. */
  scope: z.object({ models: Names, adapters: Names }).nullable(),
  /** Unix seconds, as the router answered the create. */
  createdAt: z.number().int().min(0),
  /** Unix seconds: the end of the batch's completion window. No chunk starts after it. */
  expiresAt: z.number().int().min(0),
});
export type BatchGrant = z.infer<typeof BatchGrant>;

/** Writes the grant whole, staged and renamed, owned like the batch's chunk files so that no key lists or reads it. */
export async function writeBatchGrant(files: FileStore, grant: BatchGrant): Promise<void> {
  await putBatchFile(files, grant.batchId, grantFileId(grant.batchId), `${grant.batchId}_grant.json`, Buffer.from(JSON.stringify(grant)));
}

/** The batch's grant, or undefined when there is none (or what is there is not one for this batch). */
export async function readBatchGrant(files: FileStore, batchId: string): Promise<BatchGrant | undefined> {
  if (!isBatchId(batchId)) return undefined;
  const id = grantFileId(batchId);
  const meta = await files.stat(id);
  if (meta === undefined || meta.owner !== chunkOwner(batchId) || meta.bytes > MAX_GRANT_BYTES) return undefined;
  const stream = await files.open(id);
  if (stream === undefined) return undefined;
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const part of stream as AsyncIterable<Buffer>) {
      size += part.length;
      if (size > MAX_GRANT_BYTES) return undefined;
      parts.push(part);
    }
  } finally {
    stream.destroy();
  }
  try {
    const parsed = BatchGrant.safeParse(JSON.parse(Buffer.concat(parts).toString('utf8')));
    return parsed.success && parsed.data.batchId === batchId ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** What a workflow's input says of its batch, as far as an activity is told it: each field given is checked. */
export interface GrantClaims {
  inputFileId?: string;
  endpoint?: string;
  owner?: string | null;
  /** null: the input names no scope (every model). */
  scope?: BatchScope | null;
}

/**
 * The batch's grant, when the store holds one that says what `claims` says; otherwise a
 * non-retryable failure saying to create the batch through a router. With `at` (Unix seconds),
 * also refused once the grant's completion window has ended: nothing more of the batch may run.
 */
export async function requireBatchGrant(files: FileStore, batchId: string, claims: GrantClaims, at?: number): Promise<BatchGrant> {
  const grant = await readBatchGrant(files, batchId);
  const differs = grant === undefined ? undefined : differingClaim(grant, claims);
  if (grant === undefined || differs !== undefined)
    throw notGranted(batchId, grant === undefined ? 'none is in the file store' : `its ${differs} differs`);
  if (at !== undefined && at >= grant.expiresAt)
    throw ApplicationFailure.nonRetryable(
      `batch ${batchId}'s completion window ended at ${new Date(grant.expiresAt * 1000).toISOString()}: none of its lines runs after it; create the batch again through a router's POST /v1/batches`,
      BATCH_WINDOW_ENDED,
    );
  return grant;
}

/** The failure of an activity asked to act for a batch no router granted. */
export function notGranted(batchId: string, why: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(
    `batch ${batchId} was not created through a router's POST /v1/batches (its grant: ${why}), so it runs nothing; create it there`,
    BATCH_NOT_GRANTED,
  );
}

function differingClaim(grant: BatchGrant, claims: GrantClaims): keyof GrantClaims | undefined {
  if ('inputFileId' in claims && claims.inputFileId !== grant.inputFileId) return 'inputFileId';
  if ('endpoint' in claims && claims.endpoint !== grant.endpoint) return 'endpoint';
  if ('owner' in claims && claims.owner !== grant.owner) return 'owner';
  if ('scope' in claims && canonicalScope(claims.scope ?? null) !== canonicalScope(grant.scope)) return 'scope';
  return undefined;
}

/** A scope as one string, its lists sorted: the same names in another order are the same scope. */
function canonicalScope(scope: BatchScope | null): string {
  if (scope === null) return 'null';
  const list = (names: string[] | 'all') => (names === 'all' ? 'all' : [...names].sort());
  return JSON.stringify([list(scope.models), list(scope.adapters)]);
}
