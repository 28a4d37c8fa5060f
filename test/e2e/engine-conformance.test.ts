// One conformance suite for the OpenAI surface llmgw's router and clients use, run against the
// fake engine and against llama.cpp's llama-server serving Gemma 3 270M: what both must do alike.
// Where they differ on purpose, the engine's entry below says so and docs/engine-conformance.md
// says why.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine } from '../../fake-engine/server.js';
import { inFlightFromMetrics } from '../../agent/drain.js';
import { engineErrorBody } from '../../router/http/errors.js';
import { parseEngineLoad } from '../../router/engines/scraper.js';
import { llamaServerMissing, startLlamaServer } from '../helpers/llama-server.js';
import { REFUSED, gauge, healthUntilReady, postJson, postSse, type SseStream } from '../helpers/openai-wire.js';
import { waitFor } from '../helpers/poll.js';

interface Engine {
  base: string;
  served: string;
  healthBeforeReady: number[];
  stop(): Promise<void>;
}

interface EngineKind {
  name: string;
  /** What is missing to run it here, with what to run; undefined when nothing is. */
  missing(): string | undefined;
  start(): Promise<Engine>;
  /** The /metrics gauge of requests being generated now. */
  runningGauge: string;
  // The documented differences (docs/engine-conformance.md):
  /** Refuses a model name it does not serve (llama.cpp serves any name with its one model). */
  checksModelName: boolean;
  /** vLLM's older flat error body, or OpenAI's `{error:{…}}`: the router reads both. */
  errorShape: 'vllm-flat' | 'openai';
  /** What a body malformed past the router's scan of its top level gets (llama.cpp: 500). */
  malformedStatus: number;
  /** A text stream's usage in a chunk of its own without choices (OpenAI), or on the finishing chunk (llama.cpp). */
  textUsage: 'own-chunk' | 'finish-chunk';
  /** A real model: a factual prompt at temperature 0 comes out right. */
  realModel: boolean;
}

const fakeEngine: EngineKind = {
  name: 'fake engine',
  missing: () => undefined,
  async start() {
    const served = 'fake-conformance';
    // A load time so that /health has a loading phase to show; a token rate so that a stream
    // lasts long enough to be cut off mid-way.
    const e = await startFakeEngine(
      fakeEngineOptions({ model: 'fake/conformance', servedModelNames: [served], loadTimeS: 0.3, tokensPerSecond: 200 }),
    );
    const base = `http://127.0.0.1:${e.port}`;
    return { base, served, healthBeforeReady: await healthUntilReady(base, 10_000), stop: () => e.close(0) };
  },
  runningGauge: 'vllm:num_requests_running',
  checksModelName: true,
  errorShape: 'vllm-flat',
  malformedStatus: 400,
  textUsage: 'own-chunk',
  realModel: false,
};

const llamaCpp: EngineKind = {
  name: 'llama.cpp (Gemma 3 270M)',
  missing: llamaServerMissing,
  async start() {
    const s = await startLlamaServer({ alias: 'gemma-3-270m' });
    return { base: s.base, served: s.alias, healthBeforeReady: s.healthBeforeReady, stop: () => s.stop() };
  },
  runningGauge: 'llamacpp:requests_processing',
  checksModelName: false,
  errorShape: 'openai',
  malformedStatus: 500,
  textUsage: 'finish-chunk',
  realModel: true,
};

const PROMPT = 'The Eiffel Tower is located in the city of';
const MESSAGES = [{ role: 'user' as const, content: 'Name one colour.' }];
const MAX = 4;

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** Consistent usage for an answer cut at `max` tokens (finish_reason length). */
/** A streamed request's common fields: MAX tokens at temperature 0, usage asked for. */
function streamed(e: Engine) {
  return { model: e.served, max_tokens: MAX, temperature: 0, stream: true, stream_options: { include_usage: true } };
}

function expectUsage(usage: Usage | undefined | null, max: number): void {
  expect(usage).toMatchObject({ prompt_tokens: expect.any(Number), completion_tokens: max, total_tokens: expect.any(Number) });
  expect(usage!.prompt_tokens).toBeGreaterThan(0);
  expect(usage!.total_tokens).toBe(usage!.prompt_tokens + usage!.completion_tokens);
}

interface Chunk {
  id: string;
  object: string;
  model: string;
  choices: Array<{ index: number; text?: string; delta?: { content?: string | null }; finish_reason: string | null }>;
  usage?: Usage | null;
}

/**
 * An OpenAI stream with include_usage: chunks of one id, one finish (`length`), one usage object
 * in the last chunk (one of its own without choices unless `usage` says otherwise), then
 * [DONE]. Returns the text.
 */
function expectStream(s: SseStream, object: string, max: number, usage: 'own-chunk' | 'finish-chunk'): string {
  expect(s.status).toBe(200);
  expect(s.contentType).toMatch(/^text\/event-stream/);
  expect(s.other).toEqual([]);
  expect(s.data.at(-1)).toBe('[DONE]');
  const chunks = s.data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
  for (const c of chunks) expect(c).toMatchObject({ id: chunks[0]!.id, object, model: expect.any(String) });
  // The router counts a key's tokens from the usage it finds in a stream (router/http/limits.ts): once.
  expect(chunks.filter((c) => (c.usage ?? null) !== null)).toEqual([chunks.at(-1)]);
  expectUsage(chunks.at(-1)!.usage, max);
  if (usage === 'own-chunk') expect(chunks.pop()!.choices).toEqual([]);
  for (const c of chunks) expect(c.choices).toHaveLength(1);
  expect(chunks.map((c) => c.choices[0]!.finish_reason).filter((f) => f !== null)).toEqual(['length']);
  expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('length');
  return chunks.map((c) => c.choices[0]!.text ?? c.choices[0]!.delta?.content ?? '').join('');
}

describe.each([fakeEngine, llamaCpp])('OpenAI conformance: $name', (kind) => {
  let engine: Engine | undefined;
  let missing: string | undefined;
  let client: OpenAI;

  beforeAll(async () => {
    missing = kind.missing();
    if (missing !== undefined) {
      if (process.env.CI === 'true') throw new Error(`${kind.name}: ${missing}`);
      return;
    }
    engine = await kind.start();
    client = new OpenAI({ baseURL: `${engine.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 30_000 });
  }, 180_000);

  afterAll(async () => {
    await engine?.stop();
  });

  /** The engine, or the test skipped with what to run to have it. */
  const use = (ctx: TestContext): Engine => engine ?? ctx.skip(`${kind.name}: ${missing}`);

  /** An error (a 4xx unless `status` says) in the engine's shape, which the router turns into OpenAI's keeping the message. */
  const expectRefusal = (r: { status: number; raw: string; json: unknown }, status?: number) => {
    if (status !== undefined) expect(r.status).toBe(status);
    else expect(Math.floor(r.status / 100), `status ${r.status}: ${r.raw}`).toBe(4);
    const fields = { message: expect.any(String), type: expect.any(String) };
    if (kind.errorShape === 'openai') expect(r.json).toMatchObject({ error: fields });
    else expect(r.json).toMatchObject({ object: 'error', ...fields, code: r.status });
    const routed = JSON.parse(engineErrorBody(r.status, r.raw)) as { error: { message: string } };
    const own = kind.errorShape === 'openai' ? (r.json as { error: { message: string } }).error : (r.json as { message: string });
    expect(routed.error.message).toBe(own.message);
  };

  it('answers /health 503 while loading, then 200', async (ctx) => {
    const e = use(ctx);
    expect(e.healthBeforeReady).toContain(503);
    expect(e.healthBeforeReady.filter((s) => s !== REFUSED && s !== 503)).toEqual([]);
    expect((await fetch(`${e.base}/health`)).status).toBe(200);
  });

  it('lists the served name on /v1/models', async (ctx) => {
    const e = use(ctx);
    const ids = (await client.models.list()).data.map((m) => m.id);
    expect(ids).toContain(e.served);
  });

  it('answers a chat completion in one object, cut at max_tokens', async (ctx) => {
    const e = use(ctx);
    const c = await client.chat.completions.create({ model: e.served, messages: MESSAGES, max_tokens: MAX, temperature: 0 });
    expect(c).toMatchObject({ id: expect.any(String), object: 'chat.completion', model: expect.any(String), created: expect.any(Number) });
    expect(c.choices).toHaveLength(1);
    expect(c.choices[0]).toMatchObject({ index: 0, finish_reason: 'length', message: { role: 'assistant', content: expect.any(String) } });
    expectUsage(c.usage, MAX);
  });

  it('answers a text completion in one object, cut at max_tokens', async (ctx) => {
    const e = use(ctx);
    const c = await client.completions.create({ model: e.served, prompt: PROMPT, max_tokens: MAX, temperature: 0 });
    expect(c).toMatchObject({ id: expect.any(String), object: 'text_completion', model: expect.any(String), created: expect.any(Number) });
    expect(c.choices).toHaveLength(1);
    expect(c.choices[0]).toMatchObject({ index: 0, finish_reason: 'length', text: expect.any(String) });
    expectUsage(c.usage, MAX);
    if (kind.realModel) expect(c.choices[0]!.text).toContain('Paris');
  });

  it('streams a chat completion as chat.completion.chunk events, usage last, then [DONE]', async (ctx) => {
    const e = use(ctx);
    const body = { ...streamed(e), messages: MESSAGES };
    const text = expectStream(await postSse(`${e.base}/v1/chat/completions`, body), 'chat.completion.chunk', MAX, 'own-chunk');
    expect(text.length).toBeGreaterThan(0);
  });

  it('streams a text completion as text_completion events, usage last, then [DONE]', async (ctx) => {
    const e = use(ctx);
    if (kind.textUsage === 'finish-chunk') await ctx.annotate(`${kind.name} puts a text stream's usage on its finishing chunk`);
    const body = { ...streamed(e), prompt: PROMPT };
    const text = expectStream(await postSse(`${e.base}/v1/completions`, body), 'text_completion', MAX, kind.textUsage);
    if (kind.realModel) expect(text).toContain('Paris');
  });

  it('streams to the openai client as its users read it', async (ctx) => {
    const e = use(ctx);
    const stream = await client.chat.completions.create({
      model: e.served,
      messages: MESSAGES,
      max_tokens: MAX,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null | undefined;
    let usage: Usage | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish ??= chunk.choices[0]?.finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text.length).toBeGreaterThan(0);
    expect(finish).toBe('length');
    expectUsage(usage, MAX);
  });

  it('refuses a chat request without messages, or with a wrongly typed field, with a 4xx error', async (ctx) => {
    const e = use(ctx);
    const url = `${e.base}/v1/chat/completions`;
    expectRefusal(await postJson(url, { model: e.served, max_tokens: MAX }));
    expectRefusal(await postJson(url, { model: e.served, messages: 'Name one colour.', max_tokens: MAX }));
    expectRefusal(await postJson(url, { model: e.served, messages: MESSAGES, max_tokens: 'four' }));
  });

  it('refuses a body malformed inside, which the router passes on unparsed', async (ctx) => {
    const e = use(ctx);
    // router/http/body.ts checks the top level only: this reaches the engine, and its answer the client.
    const body = `{"model":${JSON.stringify(e.served)},"messages":[1,,2]}`;
    const res = await fetch(`${e.base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const raw = await res.text();
    expectRefusal({ status: res.status, raw, json: JSON.parse(raw) }, kind.malformedStatus);
    if (kind.malformedStatus !== 400) await ctx.annotate(`${kind.name} answers malformed JSON with ${kind.malformedStatus}`);
  });

  it('refuses a text request without a prompt with a 4xx error', async (ctx) => {
    const e = use(ctx);
    expectRefusal(await postJson(`${e.base}/v1/completions`, { model: e.served, max_tokens: MAX }));
  });

  it('refuses a model it does not serve, where it checks names', async (ctx) => {
    const e = use(ctx);
    const r = await postJson(`${e.base}/v1/chat/completions`, { model: 'no-such-model', messages: MESSAGES, max_tokens: 1 });
    if (kind.checksModelName) {
      expect(r.status).toBe(404);
      expectRefusal(r);
    } else {
      // Documented: one model per llama-server, whatever the name; the router checks names first.
      expect(r.status).toBe(200);
      await ctx.annotate(`${kind.name} answers a model name it does not serve (docs/engine-conformance.md)`);
    }
  });

  it('tells the router and the agent its load on /metrics, in names they read (docs/engines.md)', async (ctx) => {
    const e = use(ctx);
    const page = await (await fetch(`${e.base}/metrics`)).text();
    expect(await gauge(e.base, kind.runningGauge)).toBe(0);
    expect(parseEngineLoad(page)).toMatchObject({ running: 0, waiting: 0 });
    expect(inFlightFromMetrics(page)).toBe(0);
  });

  it('stops generating for a client that disconnects mid-stream, and serves the next request', async (ctx) => {
    const e = use(ctx);
    const abort = new AbortController();
    // ignore_eos (vLLM's and llama.cpp's): the stream must still be running when it is cut.
    const body = { model: e.served, prompt: PROMPT, max_tokens: 1000, ignore_eos: true, stream: true };
    const res = await fetch(`${e.base}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: abort.signal,
    });
    const reader = res.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    expect(await gauge(e.base, kind.runningGauge)).toBe(1);
    abort.abort();
    await waitFor(async () => (await gauge(e.base, kind.runningGauge)) === 0, 10_000);
    const next = await client.completions.create({ model: e.served, prompt: PROMPT, max_tokens: 2, temperature: 0 });
    expect(next.choices[0]!.finish_reason).toBe('length');
  });
});
