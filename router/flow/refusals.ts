// How the waiting room answers a request it does not send: the error in OpenAI's shape with a
// Retry-After that fits why it waited, and the counts by model, tenant and priority. Router side;
// flow/waiting-room.ts decides when, this file says what.
import { sendError } from '../http/errors.js';
import type { ExchangeResponse, RoutedRequest } from '../engines/routed-request.js';
import type { WakeMetrics } from '../metrics.js';
import type { FlowMetrics } from './flow-metrics.js';
import type { Held, HoldReason } from './queue.js';
import { priorityLabel } from './priority.js';
import { TTFT_HEADER } from './deadline.js';

/** A cold start takes seconds to minutes; a saturated replica frees a slot within a generation. */
const RETRY_AFTER_S: Record<HoldReason, number> = { no_replica: 5, sleeping: 5, saturated: 1 };

export type HeldOutcome = 'timeout' | 'removed' | 'stopping';
export type HeldErrorKind = 'queue_timeout' | 'unknown_model' | 'no_replica' | 'router_stopping';

export class Refusals {
  constructor(
    private readonly metrics: FlowMetrics,
    private readonly wakeMetrics: WakeMetrics | undefined,
  ) {}

  /** How a wait ended, timed. */
  observe(held: Held, outcome: string, waitedMs: number): void {
    this.metrics.wait.observe({ model: held.model, outcome }, waitedMs / 1000);
    if (held.reason === 'sleeping') this.wakeMetrics?.waited(held.model, outcome, waitedMs / 1000);
  }

  /** A request taken off its line answered with an error (503, or 404 for a model removed). */
  answer(held: Held, outcome: HeldOutcome, kind: HeldErrorKind, message: string): void {
    this.observe(held, outcome, performance.now() - held.heldAt);
    this.metrics.refusedCount.inc({ model: held.model, reason: outcome });
    if (outcome === 'timeout') this.metrics.refused(held.model, held.request.flow, 'timeout');
    sendError(held.res, kind, message, false, RETRY_AFTER_S[held.reason]);
  }

  /** Its deadline for a first token passed while it was held: 429, not sent late. */
  deadlinePassed(held: Held, ttftMs: number, waitedMs: number): void {
    this.observe(held, 'deadline', waitedMs);
    this.metrics.deadline(held.model, held.request.flow, 'missed');
    this.metrics.refused(held.model, held.request.flow, 'deadline');
    this.metrics.refusedCount.inc({ model: held.model, reason: 'deadline' });
    const message = `The request's deadline for a first token (${ttftMs} ms, ${TTFT_HEADER}) passed while it waited for a replica of model \`${held.model}\`; it was not sent.`;
    sendError(held.res, 'deadline_missed', message, false, RETRY_AFTER_S[held.reason]);
  }

  /**
   * 429 for a request the line has no room for (`full`), or gives up (already taken off its line)
   * for a higher priority (`shed`) or for a tenant holding less of the line (`shed_share`).
   */
  refuse(held: Held, why: 'full' | 'shed' | 'shed_share'): void {
    const reason = why === 'full' ? 'full' : 'shed';
    if (reason === 'shed') this.observe(held, 'shed', performance.now() - held.heldAt);
    this.metrics.refusedCount.inc({ model: held.model, reason });
    this.metrics.refused(held.model, held.request.flow, reason);
    const waiting = `Too many requests are waiting for model \`${held.model}\``;
    const message =
      why === 'full'
        ? `${waiting}; please try again shortly.`
        : why === 'shed'
          ? `${waiting} and this one's priority (${priorityLabel(held.request.flow.priority)}) is the lowest; please try again shortly.`
          : `${waiting} and this request's tenant holds the most of them for its weight; please try again shortly.`;
    sendError(held.res, 'queue_full', message, false, RETRY_AFTER_S[held.reason]);
  }

  /** 429 at once: no replica is predicted to give the first token (or the tokens after) in time. */
  refuseDeadline(model: string, res: ExchangeResponse, request: RoutedRequest, ttftMs: number, tpotMs: number | undefined): void {
    this.metrics.deadline(model, request.flow, 'refused');
    this.metrics.refused(model, request.flow, 'deadline');
    this.metrics.refusedCount.inc({ model, reason: 'deadline' });
    const { deadline } = request;
    const parts: string[] = [];
    if (deadline?.ttftMs !== undefined) parts.push(`first token in ${Math.round(ttftMs)} ms (asked ${deadline.ttftMs} ms)`);
    if (deadline?.tpotMs !== undefined && tpotMs !== undefined)
      parts.push(`${tpotMs.toFixed(1)} ms per token (asked ${deadline.tpotMs} ms)`);
    const message = `No replica of model \`${model}\` is predicted to meet this request's deadline: best predicted ${parts.join(', ')}. Try again later or with a longer deadline.`;
    sendError(res, 'deadline_unmeetable', message, false, Math.max(1, Math.ceil(ttftMs / 1000)));
  }
}
