// A batch through restarts (issue 40): the control worker stopped mid-chunk (its running chunks
// cancelled, as a worker killed mid-chunk loses them) and another started, then the router closed
// and started again on its port, both during one batch. The batch completes and every custom_id
// appears exactly once in its output: a chunk retried after the restart rewrote its file whole.
import { describe, expect, it } from 'vitest';
import { chatLine, FINAL, linesOf, until, upload, useBatchStack } from '../helpers/batch-stack.js';

const stack = useBatchStack();

describe('batch restarts', () => {
  it('completes through a worker restart and a router restart, each custom_id exactly once', async () => {
    const { a, restartRouter } = await stack.start();
    // 600 lines of a tenth of a second each: six chunks, three at a time, some ten seconds in all.
    const lines = Array.from({ length: 600 }, (_, i) => chatLine(`line-${i}`, 'slow', 2));
    const batch = await a.batches.create({
      input_file_id: await upload(a, lines),
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });

    await until(a, batch.id, (x) => x.status === 'in_progress', 15_000);
    // Mid-chunk: the first chunks have sent some of their lines and written nothing yet.
    await new Promise((r) => setTimeout(r, 1500));
    await stack.restartWorker();
    const mid = await until(a, batch.id, (x) => x.request_counts!.completed >= 100, 30_000);
    expect(mid.status).toBe('in_progress');
    await restartRouter();

    const done = await until(a, batch.id, (x) => FINAL.includes(x.status), 45_000);
    expect(done).toMatchObject({ status: 'completed', request_counts: { total: 600, completed: 600, failed: 0 } });
    const output = await linesOf(a, done.output_file_id);
    const ids = output.map((l) => l.custom_id as string).sort();
    expect(ids).toEqual(lines.map((_, i) => `line-${i}`).sort());
    expect(done.error_file_id).toBeNull();

    // The worker's restart cut chunks short: they ran again (a second attempt), yet wrote once.
    let retried = 0;
    for await (const run of stack.client().workflow.list({ query: `WorkflowId = '${batch.id}'` })) {
      const history = await stack.client().workflow.getHandle(batch.id, run.runId).fetchHistory();
      retried += (history.events ?? []).filter((e) => (e.activityTaskStartedEventAttributes?.attempt ?? 1) > 1).length;
    }
    expect(retried).toBeGreaterThan(0);
    // Lines cut off by the router's restart were sent again (llmgw_batch_lines{outcome="retried"}).
    expect(stack.lines.retried).toBeGreaterThan(0);
    expect(stack.lines.completed).toBeGreaterThanOrEqual(600);
    console.log(
      `batch: ${retried} chunk(s) retried after the worker restart, ${stack.lines.retried} line(s) sent again; 600 lines, each once`,
    );
  }, 90_000);
});
