// What a batch shows: its state as the batch workflow keeps it (its query and its memo, which
// the router reads), and OpenAI's batch object made from it. Safe to import from workflows.
import type { BatchEndpoint, BatchLineError } from './batch-lines.js';

export const BATCH_STATUSES = [
  'validating',
  'in_progress',
  'finalizing',
  'completed',
  'failed',
  'expired',
  'cancelling',
  'cancelled',
] as const;
export type BatchStatus = (typeof BATCH_STATUSES)[number];

/** The statuses a batch ends in: its workflow has returned. */
export function isFinal(status: BatchStatus): boolean {
  return status === 'completed' || status === 'failed' || status === 'expired' || status === 'cancelled';
}

/** The memo key a batch workflow keeps its view under. */
export const BATCH_MEMO = 'llmgwBatch';

export interface BatchCounts {
  total: number;
  completed: number;
  failed: number;
}

/** A batch as its workflow keeps it. Times are Unix seconds, null until the batch got there. */
export interface BatchView {
  id: string;
  /** The creating API key's id (never the key), null when the router had no keys. */
  owner: string | null;
  endpoint: BatchEndpoint;
  inputFileId: string;
  completionWindow: string;
  status: BatchStatus;
  errors: BatchLineError[] | null;
  outputFileId: string | null;
  errorFileId: string | null;
  createdAt: number;
  inProgressAt: number | null;
  expiresAt: number;
  finalizingAt: number | null;
  completedAt: number | null;
  failedAt: number | null;
  expiredAt: number | null;
  cancellingAt: number | null;
  cancelledAt: number | null;
  counts: BatchCounts;
  metadata: Record<string, string> | null;
}

/** OpenAI's batch object, as the official clients read it. */
export function batchObject(v: BatchView): Record<string, unknown> {
  return {
    id: v.id,
    object: 'batch',
    endpoint: v.endpoint,
    errors: v.errors === null ? null : { object: 'list', data: v.errors },
    input_file_id: v.inputFileId,
    completion_window: v.completionWindow,
    status: v.status,
    output_file_id: v.outputFileId,
    error_file_id: v.errorFileId,
    created_at: v.createdAt,
    in_progress_at: v.inProgressAt,
    expires_at: v.expiresAt,
    finalizing_at: v.finalizingAt,
    completed_at: v.completedAt,
    failed_at: v.failedAt,
    expired_at: v.expiredAt,
    cancelling_at: v.cancellingAt,
    cancelled_at: v.cancelledAt,
    request_counts: { total: v.counts.total, completed: v.counts.completed, failed: v.counts.failed },
    metadata: v.metadata,
  };
}

/** A new batch's view, before its workflow has run a step. */
export function newBatchView(input: {
  batchId: string;
  owner: string | null;
  endpoint: BatchEndpoint;
  inputFileId: string;
  completionWindowSeconds: number;
  createdAt: number;
  metadata: Record<string, string> | null;
}): BatchView {
  return {
    id: input.batchId,
    owner: input.owner,
    endpoint: input.endpoint,
    inputFileId: input.inputFileId,
    completionWindow: windowText(input.completionWindowSeconds),
    status: 'validating',
    errors: null,
    outputFileId: null,
    errorFileId: null,
    createdAt: input.createdAt,
    inProgressAt: null,
    expiresAt: input.createdAt + input.completionWindowSeconds,
    finalizingAt: null,
    completedAt: null,
    failedAt: null,
    expiredAt: null,
    cancellingAt: null,
    cancelledAt: null,
    counts: { total: 0, completed: 0, failed: 0 },
    metadata: input.metadata,
  };
}

/** `24h` for a day, else the shortest exact unit (`90m`, `45s`). */
export function windowText(seconds: number): string {
  if (seconds % 3600 === 0) return `${seconds / 3600}h`;
  if (seconds % 60 === 0) return `${seconds / 60}m`;
  return `${seconds}s`;
}
