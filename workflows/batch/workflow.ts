// The `batch` workflow (batch_<id>, issue 40): OpenAI's Batch API on Temporal. It validates the
// input file in an activity, runs its requests in chunks (activities/batch-chunk.ts, a few at
// once), counts each chunk's results as its chunk file lands, continues as new every
// CHUNKS_PER_RUN chunks, and merges the chunk files into the output and error files. A cancel
// or the completion window's end stops it with what is done. Workflow side (deterministic).
//
// Pinned by the control worker's default, like every workflow but reconcileNode (docs/upgrades.md):
// a batch finishes on the build that started it, its continued runs included (at most its
// completion window, 24 h), so it carries no patched() branches and no park prologue.
import {
  ActivityFailure,
  CancellationScope,
  condition,
  isCancellation,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertMemo,
} from '@temporalio/workflow';
import { planChunks } from '../../batches/batch-lines.js';
import { BATCH_MEMO, isFinal, newBatchView, type BatchStatus, type BatchView } from '../../batches/batch-view.js';
import { batchStatusQuery, cancelBatchSignal } from '../definitions.js';
import { continueAsNewWith } from '../upgrade.js';
import { refusedCarried, sealForNextRun } from '../carried.js';
import { CHUNK_SIZE, CHUNKS_PER_RUN, PARALLEL_CHUNKS, chunks, finalizing, validation, type BatchInput } from './state.js';

const nowS = (): number => Math.floor(Date.now() / 1000);

export async function batch(input: BatchInput): Promise<BatchView> {
  let view: BatchView = newBatchView(input);
  let nextChunk = 0;
  let doneChunks: number[] = [];
  let stopping: 'cancelled' | 'expired' | 'failed' | undefined;
  let stopWhy: string | undefined;
  const publish = (): void => {
    upsertMemo({ [BATCH_MEMO]: view });
    const c = view.counts;
    setCurrentDetails(`**${view.status}**: ${c.completed + c.failed} of ${c.total} requests done, ${c.failed} failed`);
  };
  const stop = (why: 'cancelled' | 'expired' | 'failed', message?: string): void => {
    if (stopping !== undefined || isFinal(view.status) || view.status === 'finalizing') return;
    stopping = why;
    stopWhy = message;
    if (why === 'cancelled') view = { ...view, status: 'cancelling', cancellingAt: nowS() };
    publish();
  };
  setHandler(batchStatusQuery, () => view);
  setHandler(cancelBatchSignal, () => stop('cancelled'));

  if (input.carried) {
    const refused = await refusedCarried(input);
    if (refused !== undefined)
      return end({
        ...view,
        status: 'failed',
        failedAt: nowS(),
        errors: [
          {
            code: 'carried_state_refused',
            message: `This batch's state could not be trusted across a continue-as-new (${refused}); create the batch again.`,
            line: null,
            param: null,
          },
        ],
      });
    ({ view, nextChunk, doneChunks } = input.carried);
    // Cancelled while the last run handed over: honoured before anything else starts.
    if (view.status === 'cancelling') stopping = 'cancelled';
    // This run's memo is what the last run handed over; it is made current at once all the same.
    publish();
  } else {
    publish();
    const checked = await failedAs(() =>
      validation().validateBatchInput({
        batchId: input.batchId,
        inputFileId: input.inputFileId,
        endpoint: input.endpoint,
        owner: input.owner,
        ...(input.scope ? { scope: input.scope } : {}),
      }),
    );
    if ('failure' in checked || !checked.ok) {
      const errors =
        'failure' in checked ? [{ code: 'validation_failed', message: checked.failure, line: null, param: null }] : checked.errors;
      return end({ ...view, status: 'failed', failedAt: nowS(), errors });
    }
    // A cancel that came while validating stays `cancelling`: nothing starts, and it ends cancelled.
    const status = stopping === undefined ? ('in_progress' as const) : view.status;
    view = { ...view, status, inProgressAt: nowS(), counts: { total: checked.total, completed: 0, failed: 0 } };
    publish();
  }

  // The completion window, as a timer in each run: what is left of it.
  const window = new CancellationScope();
  void window
    .run(() => sleep(Math.max(1, view.expiresAt * 1000 - Date.now())))
    .then(
      () => stop('expired'),
      () => undefined,
    );
  const { chunkSize = CHUNK_SIZE, parallelChunks = PARALLEL_CHUNKS, chunksPerRun = CHUNKS_PER_RUN } = input.tuning ?? {};
  const plan = planChunks(view.counts.total, chunkSize);
  const running = new CancellationScope();
  let inFlight = 0;
  let startedHere = 0;
  const start = (index: number): void => {
    const chunk = plan[index];
    if (chunk === undefined) return;
    inFlight++;
    startedHere++;
    const summary = `runBatchChunk ${index + 1} of ${plan.length}: requests ${chunk.start + 1} to ${chunk.end}`;
    running
      .run(() => chunks(summary).runBatchChunk({ batchId: input.batchId, inputFileId: input.inputFileId, endpoint: input.endpoint, chunk }))
      .then(
        (result) => {
          doneChunks = [...doneChunks, index];
          const c = view.counts;
          view = { ...view, counts: { ...c, completed: c.completed + result.completed, failed: c.failed + result.failed } };
          publish();
        },
        (err: unknown) => {
          if (!isCancellation(err))
            stop(
              'failed',
              `chunk ${index + 1} (requests ${chunk.start + 1} to ${chunk.end}) failed after its retries: ${causeOf(err)}; the lines done are in the output and error files, create a new batch for the rest`,
            );
        },
      )
      .finally(() => inFlight--);
  };
  for (;;) {
    while (stopping === undefined && inFlight < parallelChunks && nextChunk < plan.length && startedHere < chunksPerRun) start(nextChunk++);
    if (inFlight === 0) break;
    const count = inFlight;
    await condition(() => inFlight < count || stopping !== undefined);
    if (stopping !== undefined) {
      // Running chunks are cancelled at their next line; what they did is dropped with their files.
      running.cancel();
      await condition(() => inFlight === 0);
      break;
    }
  }
  window.cancel();
  if (stopping === undefined && nextChunk < plan.length) {
    const next = await sealForNextRun<BatchInput>(() => ({ ...input, seal: undefined, carried: { view, nextChunk, doneChunks } }));
    // A cancel that came while the seal was made is carried as `cancelling` and honoured at once.
    if (stopping === undefined) return continueAsNewWith<typeof batch>(false)(next);
  }
  return finish(stopping, stopWhy);

  async function finish(why: typeof stopping, message: string | undefined): Promise<BatchView> {
    view = { ...view, status: 'finalizing', finalizingAt: nowS() };
    publish();
    const files = await failedAs(() =>
      finalizing().finalizeBatch({
        batchId: input.batchId,
        owner: input.owner,
        chunks: doneChunks,
        started: nextChunk,
        // A cancelled or expired batch lists the requests it never counted in its error file.
        ...(why === 'cancelled' || why === 'expired'
          ? { stopped: { why, inputFileId: input.inputFileId, total: view.counts.total, chunkSize } }
          : {}),
      }),
    );
    if ('failure' in files)
      return end({
        ...view,
        status: 'failed',
        failedAt: nowS(),
        errors: [{ code: 'finalizing_failed', message: files.failure, line: null, param: null }],
      });
    view = { ...view, outputFileId: files.outputFileId, errorFileId: files.errorFileId };
    const at = nowS();
    const final: Record<typeof why & string, Partial<BatchView>> = {
      cancelled: { status: 'cancelled', cancelledAt: at },
      expired: { status: 'expired', expiredAt: at },
      failed: {
        status: 'failed',
        failedAt: at,
        errors: [{ code: 'batch_failed', message: message ?? 'the batch failed', line: null, param: null }],
      },
    };
    return end({ ...view, ...(why === undefined ? { status: 'completed' as BatchStatus, completedAt: at } : final[why]) });
  }

  function end(last: BatchView): BatchView {
    view = last;
    publish();
    return view;
  }
}

/** An activity's result, or the message of its failure (the batch then fails saying it). */
async function failedAs<T>(call: () => Promise<T>): Promise<T | { failure: string }> {
  try {
    return await call();
  } catch (err) {
    if (!(err instanceof ActivityFailure)) throw err;
    return { failure: causeOf(err) };
  }
}

function causeOf(err: unknown): string {
  const cause = err instanceof ActivityFailure ? (err.cause ?? err) : err;
  return cause instanceof Error ? cause.message : String(cause);
}
