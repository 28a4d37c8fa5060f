// A batch's grant as the router writes it at POST /v1/batches (batches/batch-grant.ts), for tests
// that call the batch activities' helpers on a store directly: an open window unless told.
import { writeBatchGrant, type BatchGrant } from '../../batches/batch-grant.js';
import type { FileStore } from '../../batches/file-store.js';

export function grantOf(fields: Pick<BatchGrant, 'batchId' | 'inputFileId'> & Partial<BatchGrant>): BatchGrant {
  const now = Math.floor(Date.now() / 1000);
  return { endpoint: '/v1/embeddings', owner: null, scope: null, createdAt: now, expiresAt: now + 24 * 3600, ...fields };
}

/** Writes the grant into `store`, as the router does before it starts the batch's workflow. */
export async function grantBatch(store: FileStore, fields: Parameters<typeof grantOf>[0]): Promise<BatchGrant> {
  const grant = grantOf(fields);
  await writeBatchGrant(store, grant);
  return grant;
}
