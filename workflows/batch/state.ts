// What a batch workflow is given and what it carries across continue-as-new, and the
// activities it calls with their timeouts and retries. Workflow side (deterministic).
import type { BatchEndpoint, BatchScope, ChunkPlan } from '../../batches/batch-lines.js';
import type { BatchView } from '../../batches/batch-view.js';
import { controlActivities } from '../toolkit.js';
import type { SealedInput } from '../carried.js';
import { BATCH_NOT_CONFIGURED } from '../../activities/batch-not-configured.js';

/** Requests per chunk: one activity, one chunk file. */
export const CHUNK_SIZE = 500;
/** Chunks run at once (each sends a few requests at a time: activities/batch-chunk.ts). */
export const PARALLEL_CHUNKS = 3;
/** Chunks one run starts before it continues as new: its history stays a few hundred events. */
export const CHUNKS_PER_RUN = 40;

export interface BatchInput extends SealedInput {
  batchId: string;
  inputFileId: string;
  endpoint: BatchEndpoint;
  completionWindowSeconds: number;
  /** The creating API key's id, never the key; null when the router had no keys. */
  owner: string | null;
  metadata: Record<string, string> | null;
  /** What the creating key may use (its model names, not the key); absent: every model. */
  scope?: BatchScope;
  /** Unix seconds, as the router answered the create. */
  createdAt: number;
  /** Smaller chunks and runs than the defaults, for tests; the router sets none. */
  tuning?: BatchTuning;
  /** Set by the run before: where the batch is. */
  carried?: BatchCarried;
}

export interface BatchTuning {
  chunkSize?: number;
  parallelChunks?: number;
  chunksPerRun?: number;
}

export interface BatchCarried {
  view: BatchView;
  /** The first chunk not yet started. */
  nextChunk: number;
  /** Chunks whose files are written and counted, in the order they finished. */
  doneChunks: number[];
}

/** A run's chunks: the batch's requests, CHUNK_SIZE at a time. */
export type { ChunkPlan };

const NO_RETRY_FOR = [BATCH_NOT_CONFIGURED];

/** Validation reads the whole file once; a few tries, since a store that fails now may answer later. */
export const validation = () =>
  controlActivities('validateBatchInput: every line checked before any runs', {
    startToCloseTimeout: '30 minutes',
    heartbeatTimeout: '2 minutes',
    retry: { maximumAttempts: 3, initialInterval: '2 seconds', nonRetryableErrorTypes: NO_RETRY_FOR },
  });

/**
 * A chunk waits as long as the router holds its lines back (each line up to ten minutes), so
 * its limit is long and its heartbeat short (it beats every 5 s whatever its lines do): a
 * killed worker's chunk moves on within 20 s, and a cancel reaches it at its next beat.
 */
export const chunks = (summary: string) =>
  controlActivities(summary, {
    startToCloseTimeout: '3 hours',
    heartbeatTimeout: '20 seconds',
    retry: { maximumAttempts: 5, initialInterval: '2 seconds', maximumInterval: '1 minute', nonRetryableErrorTypes: NO_RETRY_FOR },
  });

export const finalizing = () =>
  controlActivities('finalizeBatch: chunk files into the output and error files', {
    startToCloseTimeout: '1 hour',
    heartbeatTimeout: '2 minutes',
    retry: { maximumAttempts: 5, initialInterval: '2 seconds', nonRetryableErrorTypes: NO_RETRY_FOR },
  });
