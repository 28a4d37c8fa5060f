// Batches end to end (issue 40): the official `openai` Node client uploads a JSONL and creates
// batches on the router, the real batch workflow runs on a dev server with its real activities,
// which send each line back through the router (sheddable, with the batch key) to fake engines;
// the output and error files are downloaded and every custom_id checked to appear exactly once.
// Also: a malformed line fails validation with its number and runs nothing, another key sees
// none of it, a cancel mid-run ends `cancelled` within seconds with partial output, and a short
// completion window ends `expired` with what was done; both list the requests they never ran in
// their error file (`batch_cancelled`, `batch_expired`), so each custom_id appears once there too.
// A batch workflow a namespace member starts by hand (no router's grant) runs and sends nothing.
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { temporal } from '@temporalio/proto';
import type { Batch } from 'openai/resources/batches';
import { describe, expect, it, vi } from 'vitest';
import { batchesCommand, type BatchRow } from '../../cli/actions/batches.js';
import { temporalAddress } from '../helpers/temporal.js';
import { recordHistory } from '../helpers/histories.js';
import { chatLine, embedLine, FINAL, linesOf, OWNER_A, OWNER_C, until, upload, useBatchStack } from '../helpers/batch-stack.js';
import { WorkflowType } from '../../common/names.js';
import type { BatchInput } from '../../workflows/batch/state.js';
import type { BatchView } from '../../batches/batch-view.js';
import { engine, router, url } from '../helpers/router-harness.js';

const stack = useBatchStack();

/**
 * A stopped batch's files: every custom_id of `lines` once in output plus errors, the error file's
 * lines for requests never counted carrying `code` and no response, as many as the counts leave
 * out (they are not counted as failed). Answers those lines.
 */
function expectUnrunListed(
  lines: string[],
  output: Record<string, unknown>[],
  errors: Record<string, unknown>[],
  done: Batch,
  code: string,
): Record<string, unknown>[] {
  const ids = [...output, ...errors].map((l) => l.custom_id as string).sort();
  expect(ids).toEqual(lines.map((l) => (JSON.parse(l) as { custom_id: string }).custom_id).sort());
  const unrun = errors.filter((l) => (l.error as { code: string } | null)?.code === code);
  const counts = done.request_counts!;
  expect(unrun.length).toBe(counts.total - counts.completed - counts.failed);
  expect(unrun.length).toBeGreaterThan(0);
  for (const l of unrun) expect(l).toMatchObject({ id: expect.stringMatching(/^batch_req_[0-9a-f]{24}$/), response: null });
  return unrun;
}

describe('batches', () => {
  it('runs a chat batch and an embeddings batch to completed, every custom_id exactly once', async () => {
    const { a, b } = await stack.start();
    const chat = Array.from({ length: 900 }, (_, i) => chatLine(`chat-${i}`, i % 90 === 0 ? 'no-such-model' : 'demo'));
    const embed = Array.from({ length: 100 }, (_, i) => embedLine(`embed-${i}`));
    const [chatFile, embedFile] = [await upload(a, chat), await upload(a, embed)];
    const chatBatch = await a.batches.create({
      input_file_id: chatFile,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
      metadata: { job: 'eval' },
    });
    const embedBatch = await a.batches.create({ input_file_id: embedFile, endpoint: '/v1/embeddings', completion_window: '24h' });
    expect(chatBatch).toMatchObject({ object: 'batch', status: 'validating', input_file_id: chatFile, metadata: { job: 'eval' } });
    expect(chatBatch.id).toMatch(/^batch_[0-9a-f]{24}$/);

    // Another key: as if the batch did not exist.
    await expect(b.batches.retrieve(chatBatch.id)).rejects.toMatchObject({ status: 404 });
    await expect(b.batches.cancel(chatBatch.id)).rejects.toMatchObject({ status: 404 });

    const done = await until(a, chatBatch.id, (x) => FINAL.includes(x.status), 40_000);
    const embedDone = await until(a, embedBatch.id, (x) => FINAL.includes(x.status), 10_000);
    expect(done).toMatchObject({ status: 'completed', request_counts: { total: 900, completed: 890, failed: 10 } });
    expect(embedDone).toMatchObject({ status: 'completed', request_counts: { total: 100, completed: 100, failed: 0 } });
    // One chunk, one run: the batch workflow's replay history for the release in progress.
    recordHistory(embedBatch.id, 'batch-embeddings-completed');
    expect(done.in_progress_at).not.toBeNull();
    expect(done.finalizing_at).not.toBeNull();
    expect(done.completed_at).not.toBeNull();

    const output = await linesOf(a, done.output_file_id);
    const errors = await linesOf(a, done.error_file_id);
    const ids = [...output, ...errors].map((l) => l.custom_id as string).sort();
    expect(ids).toEqual(chat.map((l) => (JSON.parse(l) as { custom_id: string }).custom_id).sort());
    expect(output[0]).toMatchObject({ id: expect.stringMatching(/^batch_req_/), response: { status_code: 200 }, error: null });
    expect(errors).toHaveLength(10);
    expect(errors[0]).toMatchObject({ response: { status_code: 404 }, error: { code: 'model_not_found' } });
    expect((await linesOf(a, embedDone.output_file_id)).map((l) => (l.response as { body: { object: string } }).body.object)).toEqual(
      Array(100).fill('list'),
    );
    // Output and error files are OpenAI's `batch_output`, listed by it.
    const outputs = await a.files.list({ purpose: 'batch_output' });
    expect(outputs.data.map((f) => f.id)).toEqual(expect.arrayContaining([done.output_file_id, done.error_file_id]));
    expect(outputs.data.every((f) => f.purpose === 'batch_output')).toBe(true);
    expect((await a.files.list({ purpose: 'batch' })).data.map((f) => f.id)).not.toContain(done.output_file_id);
    // Its output is the owner's alone; the chunk files are gone.
    await expect(b.files.content(done.output_file_id as string)).rejects.toMatchObject({ status: 404 });
    expect((await a.files.list()).data.map((f) => f.filename).filter((n) => n.includes('chunk'))).toEqual([]);
    // Listed once each, newest first, the chat batch's three runs as one; none to the other key.
    const listed = (await a.batches.list()).data;
    expect(listed.map((x) => x.id).sort()).toEqual([chatBatch.id, embedBatch.id].sort());
    expect(listed[0]!.created_at).toBeGreaterThanOrEqual(listed[1]!.created_at);
    expect(listed.find((x) => x.id === chatBatch.id)?.status).toBe('completed');
    expect((await b.batches.list()).data).toEqual([]);

    // `llmgw batches --all --json` shows it, with its owner and progress.
    vi.stubEnv('TEMPORAL_ADDRESS', temporalAddress());
    const printed = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    let rows: BatchRow[];
    try {
      await batchesCommand({ all: true, json: true });
      rows = JSON.parse(printed.mock.calls[0]?.[0] as string) as BatchRow[];
    } finally {
      vi.unstubAllEnvs();
      printed.mockRestore();
    }
    expect(rows.find((r) => r.id === chatBatch.id)).toMatchObject({
      status: 'completed',
      owner: OWNER_A,
      progress: '900/900 (10 failed)',
    });

    // History per 1,000 lines, over every run of the chat batch (it continued as new twice).
    let events = 0;
    let runs = 0;
    for await (const run of stack.client().workflow.list({ query: `WorkflowId = '${chatBatch.id}'` })) {
      events += run.historyLength;
      runs++;
    }
    expect(runs).toBe(3);
    console.log(
      `batch: 900 lines in ${runs} runs, ${events} history events (${Math.round((events * 1000) / 900)} per 1,000 lines at 100 a chunk)`,
    );
  }, 60_000);

  it('fails a batch with a malformed line, naming its line, and runs nothing', async () => {
    const { a } = await stack.start();
    const file = await upload(a, [chatLine('x1'), '{"custom_id": "x2", "method": "POST"', chatLine('x3')]);
    const batch = await a.batches.create({ input_file_id: file, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const done = await until(a, batch.id, (x) => FINAL.includes(x.status), 15_000);
    expect(done).toMatchObject({ status: 'failed', output_file_id: null, request_counts: { total: 0, completed: 0, failed: 0 } });
    expect(done.errors?.data).toEqual([
      expect.objectContaining({ line: 2, code: 'invalid_request', message: 'Line 2 is not valid JSON.' }),
    ]);
    await expect(
      a.batches.create({ input_file_id: file, endpoint: '/v1/files' as '/v1/embeddings', completion_window: '24h' }),
    ).rejects.toMatchObject({ status: 400, type: 'invalid_request_error', param: 'endpoint', code: 'invalid_value' });
  }, 30_000);

  it('refuses lines for a model the creating key may not use, though the batch key may', async () => {
    const { c } = await stack.start();
    const file = await upload(c, [chatLine('ok', 'demo'), chatLine('not-mine', 'slow')]);
    const batch = await c.batches.create({ input_file_id: file, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const done = await until(c, batch.id, (x) => FINAL.includes(x.status), 15_000);
    expect(done.status).toBe('failed');
    expect(done.errors?.data).toEqual([expect.objectContaining({ line: 2, code: 'model_not_allowed' })]);
    expect(done.errors?.data?.[0]?.message).toMatch(/asks for model 'slow', which the key that created this batch may not use/);
  }, 30_000);

  it('cancels mid-run within seconds, its partial output downloadable', async () => {
    const { a } = await stack.start();
    const lines = Array.from({ length: 600 }, (_, i) => chatLine(`slow-${i}`, 'slow', 5));
    const batch = await a.batches.create({
      input_file_id: await upload(a, lines),
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    const going = await until(a, batch.id, (x) => x.request_counts!.completed >= 100, 30_000);
    expect(going.status).toBe('in_progress');
    const asked = Date.now();
    expect((await a.batches.cancel(batch.id)).status).toBe('cancelling');
    const done = await until(a, batch.id, (x) => FINAL.includes(x.status), 10_000);
    const tookMs = Date.now() - asked;
    expect(done.status).toBe('cancelled');
    expect(tookMs).toBeLessThan(5000);
    const output = await linesOf(a, done.output_file_id);
    expect(output.length).toBe(done.request_counts!.completed);
    expect(output.length).toBeLessThan(600);
    const unrun = expectUnrunListed(lines, output, await linesOf(a, done.error_file_id), done, 'batch_cancelled');
    expect(unrun[0]!.error).toEqual({
      code: 'batch_cancelled',
      message: 'This request could not be executed before the batch was cancelled.',
    });
    console.log(`batch: cancelled in ${tookMs} ms with ${output.length} of 600 lines done, ${unrun.length} listed batch_cancelled`);
  }, 45_000);

  it('expires when its window passes, with what was done', async () => {
    const { a } = await stack.start();
    const lines = Array.from({ length: 600 }, (_, i) => chatLine(`late-${i}`, 'slow', 5));
    const batch = await a.batches.create({
      input_file_id: await upload(a, lines),
      endpoint: '/v1/chat/completions',
      completion_window: '9s' as '24h',
    });
    expect(batch.expires_at! - batch.created_at).toBe(9);
    const done = await until(a, batch.id, (x) => FINAL.includes(x.status), 20_000);
    expect(done.status).toBe('expired');
    expect(done.expired_at).not.toBeNull();
    const output = await linesOf(a, done.output_file_id);
    expect(output.length).toBe(done.request_counts!.completed);
    expect(done.request_counts!.completed).toBeLessThan(600);
    const unrun = expectUnrunListed(lines, output, await linesOf(a, done.error_file_id), done, 'batch_expired');
    expect(unrun[0]!.error).toEqual({
      code: 'batch_expired',
      message: 'This request could not be executed before the completion window expired.',
    });
  }, 30_000);

  it('sends each line sheddable with its batch-line header and the batch key, and sorts answers into output and errors', async () => {
    const { a } = await stack.start();
    // A stand-in router: it records what each line carried and answers by the line's model.
    const seen: { model: string; priority?: string; line?: string; auth?: string }[] = [];
    const stub = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        const { model } = JSON.parse(body) as { model: string };
        const h = req.headers;
        seen.push({ model, priority: h['x-llmgw-priority'] as string, line: h['x-llmgw-batch-line'] as string, auth: h.authorization });
        const tries = seen.filter((s) => s.model === model).length;
        const answer = (status: number, json: unknown, headers: Record<string, string> = {}) =>
          res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(json));
        if (model === 'bad') return answer(400, { error: { code: 'invalid_value', message: 'temperature must be at most 2' } });
        if (model === 'broken') return answer(500, { error: { code: 'engine_crashed', message: 'the engine crashed' } });
        if (model === 'busy' && tries === 1)
          return answer(429, { error: { code: 'queue_full', message: 'held line full' } }, { 'retry-after': '1' });
        answer(200, { id: `chatcmpl-${model}`, object: 'chat.completion', choices: [] }, { 'x-request-id': `req-${model}` });
      });
    });
    await new Promise<void>((r) => stub.listen(0, '127.0.0.1', r));
    stack.sendLinesTo(`http://127.0.0.1:${(stub.address() as AddressInfo).port}`);
    try {
      const lines = ['ok', 'busy', 'bad', 'broken'].map((m) => chatLine(`c-${m}`, m));
      const batch = await a.batches.create({
        input_file_id: await upload(a, lines),
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      });
      const done = await until(a, batch.id, (x) => FINAL.includes(x.status), 20_000);
      expect(done).toMatchObject({ status: 'completed', request_counts: { total: 4, completed: 2, failed: 2 } });

      const lineOf = (m: string) => `${batch.id}:${['ok', 'busy', 'bad', 'broken'].indexOf(m) + 1}`;
      for (const s of seen)
        expect(s).toEqual({ model: s.model, priority: 'sheddable', line: lineOf(s.model), auth: 'Bearer key-of-the-batcher' });
      // busy: a 429 with Retry-After, then sent again; broken: three 500s, then an error line.
      expect(seen.filter((s) => s.model === 'busy')).toHaveLength(2);
      expect(seen.filter((s) => s.model === 'broken')).toHaveLength(3);
      const output = await linesOf(a, done.output_file_id);
      expect(output.find((l) => l.custom_id === 'c-busy')).toMatchObject({
        response: { status_code: 200, request_id: 'req-busy' },
        error: null,
      });
      const errors = await linesOf(a, done.error_file_id);
      expect(errors.find((l) => l.custom_id === 'c-bad')).toMatchObject({
        response: { status_code: 400 },
        error: { code: 'invalid_value', message: 'temperature must be at most 2' },
      });
      expect(errors.find((l) => l.custom_id === 'c-broken')).toMatchObject({
        response: { status_code: 500 },
        error: { code: 'engine_crashed' },
      });

      // The batch key is in no payload, memo or event of the batch.
      for await (const run of stack.client().workflow.list({ query: `WorkflowId = '${batch.id}'` })) {
        const history = await stack.client().workflow.getHandle(batch.id, run.runId).fetchHistory();
        // Payloads as their bytes (JSON would show them as numbers): the batch id is there, the key not.
        const bytes = Buffer.from(temporal.api.history.v1.History.encode(history).finish()).toString('latin1');
        expect(bytes).toContain(batch.id);
        expect(bytes).not.toContain('key-of-the-batcher');
      }
    } finally {
      stack.sendLinesTo(undefined);
      await new Promise((r) => stub.close(r));
    }
  }, 30_000);

  it('runs nothing of a batch workflow a namespace member starts by hand, whatever owner it names', async () => {
    const { c } = await stack.start();
    // Key c may use `demo` only; its holder uploads lines for `slow` and starts the workflow
    // themselves, naming their own key as owner and no scope, as the router never would.
    const file = await upload(c, [chatLine('mine', 'demo'), chatLine('not-mine', 'slow')]);
    const sent: string[] = [];
    const stub = createServer((req, res) => {
      sent.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
    await new Promise<void>((r) => stub.listen(0, '127.0.0.1', r));
    stack.sendLinesTo(`http://127.0.0.1:${(stub.address() as AddressInfo).port}`);
    try {
      const batchId = `batch_${randomBytes(12).toString('hex')}`;
      const input: BatchInput = {
        batchId,
        inputFileId: file,
        endpoint: '/v1/chat/completions',
        completionWindowSeconds: 3600,
        owner: OWNER_C,
        metadata: null,
        createdAt: Math.floor(Date.now() / 1000),
      };
      const handle = await stack
        .client()
        .workflow.start(WorkflowType.batch, { taskQueue: stack.taskQueue, workflowId: batchId, args: [input] });
      const view = (await handle.result()) as BatchView;
      expect(view).toMatchObject({ status: 'failed', outputFileId: null, errorFileId: null, counts: { total: 0 } });
      expect(view.errors).toEqual([expect.objectContaining({ code: 'validation_failed' })]);
      expect(view.errors?.[0]?.message).toMatch(/was not created through a router's POST \/v1\/batches .*create it there/);
      expect(sent).toEqual([]);
      // Nothing of it is any key's: key c lists its own input file only.
      expect((await c.files.list()).data.map((f) => f.id)).not.toContain(`file-${batchId.slice(6)}output`);
    } finally {
      stack.sendLinesTo(undefined);
      await new Promise((r) => stub.close(r));
    }
  }, 30_000);

  it('fails, saying what to do, when a chunk cannot run (its input file deleted mid-run)', async () => {
    const { a } = await stack.start();
    const lines = Array.from({ length: 600 }, (_, i) => chatLine(`gone-${i}`, 'slow', 2));
    const file = await upload(a, lines);
    const batch = await a.batches.create({ input_file_id: file, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await until(a, batch.id, (x) => x.status === 'in_progress', 15_000);
    await a.files.delete(file);
    const done = await until(a, batch.id, (x) => FINAL.includes(x.status), 20_000);
    expect(done.status).toBe('failed');
    expect(done.errors?.data?.[0]?.message).toMatch(/no longer in the store.*create a new batch for the rest/);
    expect((await linesOf(a, done.output_file_id)).length).toBe(done.request_counts!.completed);
  }, 30_000);

  it('answers 404 naming what to set on a router without Temporal', async () => {
    const quick = await engine({ model: 'demo' });
    const r = await router([{ servedName: 'demo', endpoint: url(quick) }]);
    const res = await fetch(`${r.base}/v1/batches`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/--files-dir/);
  });
});
