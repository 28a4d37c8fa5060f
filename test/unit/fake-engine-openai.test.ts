// The fake engine's vLLM OpenAI-compatible surface through the real OpenAI client: chat and text
// completions (deterministic, streamed at the token rate), embeddings, the model list, and errors
// in vLLM's shape.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { base, client, start, useFakeEngineHarness } from '../helpers/fake-engine-harness.js';

useFakeEngineHarness();

describe('fake engine: OpenAI surface', () => {
  it('answers chat completions with max_tokens words, the same text for the same request', async () => {
    const openai = client(await start());
    const ask = (content: string) =>
      openai.chat.completions.create({ model: 'fake/tiny', messages: [{ role: 'user', content }], max_tokens: 7 });
    const first = await ask('tell me a story');
    const again = await ask('tell me a story');
    const other = await ask('something else entirely');
    const text = first.choices[0]?.message.content ?? '';
    expect(first.object).toBe('chat.completion');
    expect(text.split(' ')).toHaveLength(7);
    expect(again.choices[0]?.message.content).toBe(text);
    expect(other.choices[0]?.message.content).not.toBe(text);
    expect(first.choices[0]?.finish_reason).toBe('length');
    expect(first.usage).toEqual({ prompt_tokens: 4, completion_tokens: 7, total_tokens: 11 });
  });

  it('streams chat tokens one chunk each, at the token rate, ending with usage and [DONE]', async () => {
    const engine = await start({ tokensPerSecond: 20 });
    const openai = client(engine);
    const request = { model: 'fake/tiny', messages: [{ role: 'user' as const, content: 'stream please' }], max_tokens: 10 };
    const whole = await openai.chat.completions.create(request);

    const t0 = performance.now();
    const stream = await openai.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
    const arrivals: number[] = [];
    let text = '';
    let role: string | undefined;
    let finish: string | null | undefined;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk');
      const choice = chunk.choices[0];
      role ??= choice?.delta.role;
      if (choice?.delta.content) {
        arrivals.push(performance.now() - t0);
        text += choice.delta.content;
      }
      if (choice?.finish_reason) finish = choice.finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(role).toBe('assistant');
    expect(arrivals).toHaveLength(10);
    expect(text).toBe(whole.choices[0]?.message.content);
    expect(finish).toBe('length');
    expect(usage).toMatchObject({ completion_tokens: 10, total_tokens: (usage?.prompt_tokens ?? 0) + 10 });
    // 10 tokens at 20/s: the first arrives about 450 ms before the last. Only lower bounds
    // are asserted: a slow machine stretches the stream, it never compresses it.
    const firstAt = arrivals[0] as number;
    const lastAt = arrivals[9] as number;
    expect(lastAt - firstAt).toBeGreaterThan(300);
  });

  it('answers text completions, streamed and not, with the same text', async () => {
    const engine = await start();
    const openai = client(engine);
    const whole = await openai.completions.create({ model: 'fake/tiny', prompt: 'Once upon a time', max_tokens: 5 });
    expect(whole.object).toBe('text_completion');
    expect(whole.usage).toEqual({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 });
    const stream = await openai.completions.create({ model: 'fake/tiny', prompt: 'Once upon a time', max_tokens: 5, stream: true });
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.text) chunks++;
      text += chunk.choices[0]?.text ?? '';
    }
    expect(chunks).toBe(5);
    expect(text).toBe(whole.choices[0]?.text);

    const raw = await fetch(`${base(engine)}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 2, stream: true }),
    });
    expect(raw.headers.get('content-type')).toContain('text/event-stream');
    const events = (await raw.text()).split('\n\n').filter(Boolean);
    expect(events).toHaveLength(4);
    expect(events.at(-2)).toContain('"finish_reason":"length"');
    expect(events.at(-1)).toBe('data: [DONE]');
  });

  it('defaults to 16 tokens when max_tokens is not given', async () => {
    const openai = client(await start());
    const out = await openai.completions.create({ model: 'fake/tiny', prompt: 'x' });
    expect(out.usage?.completion_tokens).toBe(16);
    expect(out.choices[0]?.text.split(' ')).toHaveLength(16);
  });

  it('returns deterministic unit-norm embeddings of the configured size, as floats or base64', async () => {
    const engine = await start({ embeddingDim: 8 });
    const openai = client(engine);
    // The OpenAI client asks for base64 unless told otherwise.
    const viaBase64 = await openai.embeddings.create({ model: 'fake/tiny', input: ['alpha', 'beta'] });
    const viaFloat = await openai.embeddings.create({ model: 'fake/tiny', input: 'alpha', encoding_format: 'float' });
    expect(viaBase64.data).toHaveLength(2);
    const alpha = viaBase64.data[0]?.embedding ?? [];
    expect(alpha).toHaveLength(8);
    expect(Math.hypot(...alpha)).toBeCloseTo(1, 5);
    viaFloat.data[0]?.embedding.forEach((x, i) => expect(x).toBeCloseTo(alpha[i] as number, 6));
    expect(viaBase64.data[1]?.embedding).not.toEqual(alpha);
    expect(viaBase64.usage.prompt_tokens).toBe(2);
  });

  it('lists the served model name with its root model and context length', async () => {
    const engine = await start({ servedModelNames: ['tiny'], maxModelLen: 4096 });
    const models = await client(engine).models.list();
    expect(models.data).toEqual([
      expect.objectContaining({ id: 'tiny', object: 'model', owned_by: 'llmgw-fake', root: 'fake/tiny', max_model_len: 4096 }),
    ]);
  });

  it('refuses invalid JSON with 400 and an unknown model with 404, in vLLM error shape', async () => {
    const engine = await start();
    const bad = await fetch(`${base(engine)}/v1/chat/completions`, { method: 'POST', body: '{not json' });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ object: 'error', type: 'BadRequestError', param: null, code: 400 });
    const unknown = await fetch(`${base(engine)}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'nope', prompt: 'hi' }),
    });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ object: 'error', type: 'NotFoundError', code: 404 });
    const noMessages = await fetch(`${base(engine)}/v1/chat/completions`, { method: 'POST', body: '{}' });
    expect(noMessages.status).toBe(400);
    expect(((await noMessages.json()) as { message: string }).message).toContain('messages');
  });
});
