// The router in front of real fake engines, as an OpenAI client sees it: every route through the
// official client, streaming that stays incremental, and refusals in OpenAI's error shape.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { ApiKeys } from '../../router/http/auth.js';
import { chat, engine, post, router, streamDemo, url, useRouterHarness } from '../helpers/router-harness.js';

useRouterHarness();

describe('router: the OpenAI surface through the official client', () => {
  it('answers chat (plain and streamed), completions, embeddings and the model list, like the engine does', async () => {
    const e = await engine();
    const { openai } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    const direct = new OpenAI({ baseURL: `${url(e)}/v1`, apiKey: 'x', maxRetries: 0 });
    const request = { model: 'demo', messages: [{ role: 'user' as const, content: 'tell me a story' }], max_tokens: 7 };

    const viaRouter = await openai.chat.completions.create(request);
    const viaEngine = await direct.chat.completions.create(request);
    expect(viaRouter.choices[0]?.message.content).toBe(viaEngine.choices[0]?.message.content);
    expect(viaRouter.usage).toEqual(viaEngine.usage);

    let streamed = '';
    for await (const chunk of await openai.chat.completions.create({ ...request, stream: true }))
      streamed += chunk.choices[0]?.delta.content ?? '';
    expect(streamed).toBe(viaEngine.choices[0]?.message.content);

    const completion = await openai.completions.create({ model: 'demo', prompt: 'once upon a time', max_tokens: 5 });
    expect(completion.choices[0]?.text.trim().split(' ')).toHaveLength(5);

    const embedding = await openai.embeddings.create({ model: 'demo', input: ['a', 'b'] });
    expect(embedding.data).toHaveLength(2);
    expect(embedding.data[0]?.embedding.length).toBeGreaterThan(0);

    const models = await openai.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['demo']);
  });

  it('serves a model addressed by its deployment name under the name the engine knows', async () => {
    const e = await engine();
    const { openai } = await router([{ servedName: 'demo', deployment: 'demo-canary', endpoint: url(e) }]);
    const reply = await openai.chat.completions.create({ model: 'demo-canary', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
    expect(reply.model).toBe('demo');
  });

  it("tells the client about an unknown model with the SDK's NotFoundError", async () => {
    const e = await engine();
    const { openai } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    await expect(openai.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(
      OpenAI.NotFoundError,
    );
  });

  it("passes the stream through chunk by chunk, at the engine's token rate", async () => {
    const e = await engine({ tokensPerSecond: 20 });
    const { openai } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    const stream = await streamDemo(openai, 12);
    const arrivals: number[] = [];
    for await (const chunk of stream) if (chunk.choices[0]?.delta.content) arrivals.push(performance.now());
    expect(arrivals).toHaveLength(12);
    // 12 tokens at 20/s: the first arrives ~50 ms in, the last ~600 ms in.
    expect((arrivals.at(-1) as number) - (arrivals[0] as number)).toBeGreaterThan(400);
    const gaps = arrivals.slice(1).map((t, i) => t - (arrivals[i] as number));
    const median = [...gaps].sort((a, b) => a - b)[Math.floor(gaps.length / 2)] as number;
    // Not buffered: the gaps keep the engine's 50 ms rhythm (lower bound only, so a slow
    // machine cannot fail it; buffering would collapse the gaps towards zero).
    expect(median).toBeGreaterThan(30);
  });
});

describe("router: refusals in OpenAI's error shape", () => {
  /** OpenAI's shape exactly: four fields, nothing else, and the expected status and code. */
  async function expectError(res: Response, status: number, fields: Record<string, unknown>): Promise<void> {
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toContain('application/json');
    const body = (await res.json()) as { error: Record<string, unknown> };
    expect(Object.keys(body)).toEqual(['error']);
    expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
    expect(typeof body.error.message).toBe('string');
    expect(body.error).toMatchObject(fields);
  }

  it('400 for invalid JSON and for a missing model, 404 for an unknown model or path', async () => {
    const e = await engine();
    const { base } = await router([{ servedName: 'demo', endpoint: url(e) }]);

    await expectError(await post(base, '/v1/chat/completions', '{"model": "demo",'), 400, {
      type: 'invalid_request_error',
      code: 'invalid_json',
      param: null,
    });
    await expectError(await post(base, '/v1/completions', '[1, 2]'), 400, { code: 'invalid_json' });
    await expectError(await post(base, '/v1/chat/completions', JSON.stringify({ messages: [] })), 400, {
      param: 'model',
      code: 'missing_required_parameter',
    });
    await expectError(await post(base, '/v1/embeddings', JSON.stringify({ model: 'other', input: 'x' })), 404, {
      code: 'model_not_found',
      param: 'model',
    });
    await expectError(await fetch(`${base}/v2/whatever`), 404, { code: 'unknown_url' });
    await expectError(await fetch(`${base}/v1/chat/completions`), 405, { code: 'method_not_allowed' });
  });

  it('503 with Retry-After while the model has no Ready replica, and the model is missing from the list', async () => {
    const e = await engine();
    const { base, openai } = await router([{ servedName: 'demo', endpoint: url(e), phase: 'Loading' }]);
    const res = await post(base, '/v1/chat/completions', chat());
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    await expectError(res, 503, { code: 'no_replica_ready' });
    expect((await openai.models.list()).data).toEqual([]);
  });

  it('413 for a body over the limit, whether declared or streamed', async () => {
    const e = await engine();
    const { base } = await router([{ servedName: 'demo', endpoint: url(e) }], { bodyLimitBytes: 2048 });
    const big = chat('x'.repeat(4096));
    await expectError(await post(base, '/v1/chat/completions', big), 413, { code: 'request_too_large' });
    // Without Content-Length (chunked), the limit is enforced while reading.
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(big));
        controller.close();
      },
    });
    const chunked = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body, duplex: 'half' } as RequestInit);
    expect(chunked.status).toBe(413);
    expect((await post(base, '/v1/chat/completions', chat())).status).toBe(200);
  });

  it('401 without a key or with a wrong one when keys are configured; the right key passes', async () => {
    const e = await engine();
    const { base } = await router([{ servedName: 'demo', endpoint: url(e) }], { apiKeys: new ApiKeys(['k-one', 'k-two']) });
    await expectError(await post(base, '/v1/chat/completions', chat()), 401, { code: 'invalid_api_key' });
    await expectError(await post(base, '/v1/chat/completions', chat(), { authorization: 'Bearer k-three' }), 401, {
      code: 'invalid_api_key',
    });
    expect((await fetch(`${base}/v1/models`)).status).toBe(401);
    const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'k-two', maxRetries: 0 });
    expect((await openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'x' }] })).object).toBe(
      'chat.completion',
    );
    await expect(new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 }).models.list()).rejects.toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
  });

  it("passes an engine's own error (vLLM's flat shape) through as OpenAI's, with the engine's status", async () => {
    const e = await engine({ maxModelLen: 50 });
    const { base, openai } = await router([{ servedName: 'demo', endpoint: url(e) }]);
    await expectError(await post(base, '/v1/chat/completions', chat('hi', { max_tokens: 100 })), 400, {
      message: expect.stringContaining('maximum context length'),
      type: 'BadRequestError',
      code: 400,
    });
    await expect(
      openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'x' }], max_tokens: 100 }),
    ).rejects.toBeInstanceOf(OpenAI.BadRequestError);
  });
});
