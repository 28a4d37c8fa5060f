// The pure parts of a batch: checking input lines, planning chunks, the shapes of output and
// error lines and of OpenAI's batch object, the completion window's text, and the body of a create.
import { describe, expect, it } from 'vitest';
import {
  batchRequestId,
  checkLine,
  chunkFileId,
  countedRequests,
  errorLine,
  isBatchId,
  outputLine,
  parseCompletionWindow,
  planChunks,
  scopeAllows,
  unrunLine,
} from '../../batches/batch-lines.js';
import { parseCreateBatch } from '../../batches/batch-create.js';
import { batchObject, newBatchView, windowText } from '../../batches/batch-view.js';
import { retryAfterMs } from '../../activities/batch-chunk.js';
import { batchRow } from '../../cli/actions/batches.js';

const line = (o: unknown) => JSON.stringify(o);
const good = (id: string, url = '/v1/chat/completions') => line({ custom_id: id, method: 'POST', url, body: { model: 'm', messages: [] } });

describe('batch input lines', () => {
  it('accepts a well-formed line and remembers its custom_id', () => {
    const seen = new Set<string>();
    expect(checkLine(good('a'), 3, '/v1/chat/completions', seen)).toEqual({ line: 3, customId: 'a', body: { model: 'm', messages: [] } });
    expect(seen.has('a')).toBe(true);
  });

  it('refuses each kind of malformed line, saying what is wrong', () => {
    const cases: [string, RegExp][] = [
      ['{not json', /not valid JSON/],
      ['[1,2]', /not a JSON object/],
      [line({ method: 'POST', url: '/v1/chat/completions', body: { model: 'm' } }), /no custom_id/],
      [line({ custom_id: 'x', method: 'GET', url: '/v1/chat/completions', body: { model: 'm' } }), /method "GET"/],
      [line({ custom_id: 'x', method: 'POST', url: '/v1/embeddings', body: { model: 'm' } }), /endpoint is \/v1\/chat\/completions/],
      [line({ custom_id: 'x', method: 'POST', url: '/v1/chat/completions' }), /no body/],
      [line({ custom_id: 'x', method: 'POST', url: '/v1/chat/completions', body: { messages: [] } }), /no body.model/],
      [line({ custom_id: 'x', method: 'POST', url: '/v1/chat/completions', body: { model: 'm', stream: true } }), /cannot stream/],
    ];
    for (const [text, why] of cases) {
      const checked = checkLine(text, 1, '/v1/chat/completions', new Set());
      expect('error' in checked && checked.error, text).toMatch(why);
    }
  });

  it('refuses a repeated custom_id', () => {
    const seen = new Set<string>();
    checkLine(good('a'), 1, '/v1/chat/completions', seen);
    expect(checkLine(good('a'), 2, '/v1/chat/completions', seen)).toEqual({ error: "repeats custom_id 'a' (each must be unique)" });
  });
});

describe('chunk planning', () => {
  it('covers every request exactly once, in order, the last chunk short', () => {
    const plan = planChunks(1234, 500);
    expect(plan).toEqual([
      { index: 0, start: 0, end: 500 },
      { index: 1, start: 500, end: 1000 },
      { index: 2, start: 1000, end: 1234 },
    ]);
    expect(planChunks(0, 500)).toEqual([]);
    expect(() => planChunks(10, 0)).toThrow(/at least one/);
  });
});

describe('result lines and ids', () => {
  it('writes OpenAI shapes', () => {
    const id = batchRequestId(new Uint8Array(12).fill(171));
    expect(id).toBe(`batch_req_${'ab'.repeat(12)}`);
    expect(outputLine(id, 'c1', 200, 'req-1', { ok: 1 })).toEqual({
      id,
      custom_id: 'c1',
      response: { status_code: 200, request_id: 'req-1', body: { ok: 1 } },
      error: null,
    });
    expect(errorLine(id, 'c2', { code: 'model_not_found', message: 'no' }, { statusCode: 404, requestId: 'r', body: {} })).toEqual({
      id,
      custom_id: 'c2',
      response: { status_code: 404, request_id: 'r', body: {} },
      error: { code: 'model_not_found', message: 'no' },
    });
    expect(errorLine(id, 'c3', { code: 'router_unreachable', message: 'x' }).response).toBeNull();
  });

  it("lists a stopped batch's unrun requests as OpenAI does: no response, batch_expired or batch_cancelled", () => {
    expect(unrunLine('batch_req_1', 'c9', 'expired')).toEqual({
      id: 'batch_req_1',
      custom_id: 'c9',
      response: null,
      error: { code: 'batch_expired', message: 'This request could not be executed before the completion window expired.' },
    });
    expect(unrunLine('batch_req_2', 'c9', 'cancelled').error).toEqual({
      code: 'batch_cancelled',
      message: 'This request could not be executed before the batch was cancelled.',
    });
  });

  it('tells counted requests by the chunks that were done, as planChunks cut them', () => {
    const counted = countedRequests(1234, 500, [2, 0]);
    const which = Array.from({ length: 1234 }, (_, i) => counted(i));
    expect(which.slice(0, 500).every(Boolean)).toBe(true);
    expect(which.slice(500, 1000).some(Boolean)).toBe(false);
    expect(which.slice(1000).every(Boolean)).toBe(true);
    expect([counted(-1), counted(1234), countedRequests(10, 5, [7])(3)]).toEqual([false, false, false]);
  });

  it('derives file ids a file store accepts', () => {
    const batchId = `batch_${'0f'.repeat(12)}`;
    expect(isBatchId(batchId)).toBe(true);
    expect(isBatchId('batch_../x')).toBe(false);
    expect(chunkFileId(batchId, 7)).toMatch(/^file-[A-Za-z0-9]{1,64}$/);
  });

  it('makes the batch object the openai client reads', () => {
    const view = newBatchView({
      batchId: 'batch_1',
      owner: 'k1',
      endpoint: '/v1/embeddings',
      inputFileId: 'file-1',
      completionWindowSeconds: 86400,
      createdAt: 100,
      metadata: { a: 'b' },
    });
    const o = batchObject(view);
    expect(o).toMatchObject({ object: 'batch', completion_window: '24h', expires_at: 86500, status: 'validating', errors: null });
    expect(o).toMatchObject({ request_counts: { total: 0, completed: 0, failed: 0 }, metadata: { a: 'b' } });
    expect(o).not.toHaveProperty('owner');
    expect(batchObject({ ...view, errors: [{ code: 'x', message: 'y', line: 2, param: null }] }).errors).toEqual({
      object: 'list',
      data: [{ code: 'x', message: 'y', line: 2, param: null }],
    });
  });
});

describe('completion windows and waits', () => {
  it('parses 24h and shorter windows, refuses the rest', () => {
    expect(parseCompletionWindow('24h')).toBe(86400);
    expect(parseCompletionWindow('90m')).toBe(5400);
    expect(parseCompletionWindow('2s')).toBe(2);
    for (const bad of ['25h', '0s', '1d', '', 24, null]) expect(parseCompletionWindow(bad)).toBeUndefined();
    expect(windowText(86400)).toBe('24h');
    expect(windowText(90)).toBe('90s');
  });

  it('waits as long as Retry-After says, within bounds', () => {
    expect(retryAfterMs('2', 1)).toBe(2000);
    expect(retryAfterMs('3600', 1)).toBe(30_000);
    expect(retryAfterMs(null, 1)).toBe(500);
    expect(retryAfterMs('soon', 3)).toBe(2000);
  });
});

describe('llmgw batches rows', () => {
  const view = newBatchView({
    batchId: 'batch_1',
    owner: null,
    endpoint: '/v1/chat/completions',
    inputFileId: 'file-1',
    completionWindowSeconds: 86400,
    createdAt: 1000,
    metadata: null,
  });

  it('shows progress and the rate since the batch went in progress', () => {
    expect(batchRow(view, 1100)).toMatchObject({ status: 'validating', owner: '—', progress: '0/0', perSecond: null });
    const running = { ...view, status: 'in_progress' as const, inProgressAt: 1010, counts: { total: 1000, completed: 380, failed: 20 } };
    expect(batchRow(running, 1110)).toMatchObject({ progress: '400/1000 (20 failed)', perSecond: 4 });
    // Once finished, the rate is to its end, not to now.
    const done = {
      ...running,
      status: 'completed' as const,
      finalizingAt: 1210,
      completedAt: 1215,
      counts: { total: 1000, completed: 980, failed: 20 },
    };
    expect(batchRow(done, 5000).perSecond).toBe(5);
  });
});

describe("the creating key's scope", () => {
  it('allows what its lists name, everything without a scope', () => {
    expect(scopeAllows(undefined, 'x')).toBe(true);
    expect(scopeAllows({ models: 'all', adapters: [] }, 'x')).toBe(true);
    expect(scopeAllows({ models: ['demo'], adapters: ['sql-lora'] }, 'demo')).toBe(true);
    expect(scopeAllows({ models: ['demo'], adapters: ['sql-lora'] }, 'sql-lora')).toBe(true);
    expect(scopeAllows({ models: ['demo'], adapters: ['sql-lora'] }, 'slow')).toBe(false);
    // Every adapter, but which names are adapters validation cannot tell: only the models listed.
    expect(scopeAllows({ models: ['demo'], adapters: 'all' }, 'slow')).toBe(false);
  });
});

describe('the body of POST /v1/batches', () => {
  const good = { input_file_id: 'file-1', endpoint: '/v1/embeddings', completion_window: '24h' };

  it('takes what the official clients send, metadata optional or null', () => {
    expect(parseCreateBatch({ ...good, metadata: { job: 'eval' }, extra: 1 })).toEqual({
      body: { ...good, completion_window: 86400, metadata: { job: 'eval' } },
    });
    expect(parseCreateBatch({ ...good, completion_window: '30s', metadata: null })).toMatchObject({ body: { completion_window: 30 } });
  });

  it("refuses a parameter missing or wrong in OpenAI's terms, naming it and what to send", () => {
    const cases: [Record<string, unknown>, string, string, RegExp][] = [
      [
        { ...good, input_file_id: undefined },
        'input_file_id',
        'missing_required_parameter',
        /^Missing required parameter: 'input_file_id'\.$/,
      ],
      [{ ...good, input_file_id: 7 }, 'input_file_id', 'invalid_value', /id of a file uploaded with purpose 'batch'.*not 7/],
      [{ ...good, endpoint: '/v1/files' }, 'endpoint', 'invalid_value', /one of \["\/v1\/chat\/completions".*not "\/v1\/files"/],
      [{ ...good, endpoint: null }, 'endpoint', 'missing_required_parameter', /'endpoint'/],
      [{ ...good, completion_window: '48h' }, 'completion_window', 'invalid_value', /'24h' \(or shorter.*not "48h"/],
      [{ ...good, metadata: { a: 1 } }, 'metadata', 'invalid_value', /at most 16 string values/],
      [{ ...good, metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata', 'invalid_value', /16/],
      [{ ...good, metadata: { ['k'.repeat(65)]: 'v' } }, 'metadata', 'invalid_value', /keys up to 64/],
    ];
    for (const [body, param, code, message] of cases) {
      const checked = parseCreateBatch(body);
      expect('refusal' in checked && checked.refusal, JSON.stringify(body).slice(0, 80)).toMatchObject({ param, code });
      expect('refusal' in checked && checked.refusal.message).toMatch(message);
    }
    // Several wrong: the first in the body's documented order is named.
    expect(parseCreateBatch({ endpoint: 'x' })).toMatchObject({ refusal: { param: 'input_file_id' } });
  });
});
