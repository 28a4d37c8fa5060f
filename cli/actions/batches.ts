// `llmgw batches` and `llmgw batches cancel ID`: every batch of the Batch API with its progress
// and rate, read from the batch workflows' memos (no query, no event), and an operator's cancel
// (the batch's own `cancelBatch` signal, as the router sends it). Operator side.
import { WorkflowNotFoundError } from '@temporalio/client';
import { listBatchViews } from '../../batches/batch-list.js';
import { isBatchId } from '../../batches/batch-lines.js';
import { isFinal, type BatchView } from '../../batches/batch-view.js';
import { cancelBatchSignal } from '../../workflows/definitions.js';
import { CliError } from '../errors.js';
import { withClient } from './client.js';
import { printList } from './table.js';

export interface BatchRow {
  id: string;
  status: string;
  owner: string;
  endpoint: string;
  /** `done/total`, with the failed among them. */
  progress: string;
  /** Requests a second since it went in progress, to its end or to now; null before. */
  perSecond: number | null;
  createdAt: number;
  expiresAt: number;
}

/** A batch as `llmgw batches` shows it, at `nowS` (Unix seconds). */
export function batchRow(v: BatchView, nowS: number): BatchRow {
  const c = v.counts;
  const done = c.completed + c.failed;
  const ended = v.finalizingAt ?? v.completedAt ?? v.failedAt ?? v.expiredAt ?? v.cancelledAt;
  const until = isFinal(v.status) || v.status === 'finalizing' ? (ended ?? nowS) : nowS;
  const seconds = v.inProgressAt === null ? 0 : until - v.inProgressAt;
  return {
    id: v.id,
    status: v.status,
    owner: v.owner ?? '—',
    endpoint: v.endpoint,
    progress: `${done}/${c.total}${c.failed ? ` (${c.failed} failed)` : ''}`,
    perSecond: v.inProgressAt === null ? null : Math.round((done / Math.max(1, seconds)) * 10) / 10,
    createdAt: v.createdAt,
    expiresAt: v.expiresAt,
  };
}

const time = (s: number) => new Date(s * 1000).toISOString().replace('T', ' ').slice(0, 19);

export async function batchesCommand(opts: { json?: boolean; all?: boolean }): Promise<void> {
  const views = await withClient((client) => listBatchViews(client, (v) => opts.all === true || !isFinal(v.status)));
  const now = Math.floor(Date.now() / 1000);
  printList(
    views.map((v) => batchRow(v, now)),
    {
      json: opts.json,
      empty: opts.all ? 'no batches (POST /v1/batches on a router creates one)' : 'no batch is running (--all lists finished ones too)',
      head: ['batch', 'status', 'owner', 'endpoint', 'done/total', 'req/s', 'created', 'expires'],
      row: (r) => [
        r.id,
        r.status,
        r.owner,
        r.endpoint,
        r.progress,
        r.perSecond === null ? '—' : String(r.perSecond),
        time(r.createdAt),
        time(r.expiresAt),
      ],
    },
  );
}

export async function batchesCancelCommand(id: string): Promise<void> {
  if (!isBatchId(id)) throw new CliError(`${id} is not a batch id (batch_ and 24 hex digits; \`llmgw batches\` lists them)`);
  await withClient(async (client) => {
    try {
      await client.workflow.getHandle(id).signal(cancelBatchSignal, { by: 'operator' });
    } catch (error) {
      if (error instanceof WorkflowNotFoundError)
        throw new CliError(`${id} is not running (\`llmgw batches --all\` lists finished batches)`);
      throw error;
    }
  });
  console.log(`${id}: cancelling; what is done stays in its output file`);
}
