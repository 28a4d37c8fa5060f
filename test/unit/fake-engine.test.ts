// The fake engine speaks the vLLM OpenAI-compatible surface well enough for the real OpenAI
// client, a router and the agent: health while loading, streaming at a token rate, metrics,
// multi-node membership, and the injected faults.
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { runFakeEngine, type FakeEngineProcess } from '../../fake-engine/main.js';
import { FakeEngineArgsError, fakeEngineOptions, parseFakeEngineArgs, type FakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';

const running: FakeEngine[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((e) => e.close(0)));
});

async function start(overrides: Partial<FakeEngineOptions> = {}, hooks = {}): Promise<FakeEngine> {
  const engine = await startFakeEngine(fakeEngineOptions({ model: 'fake/tiny', ...overrides }), hooks);
  running.push(engine);
  return engine;
}

const base = (e: FakeEngine) => `http://127.0.0.1:${e.port}`;
const client = (e: FakeEngine) => new OpenAI({ baseURL: `${base(e)}/v1`, apiKey: 'x', maxRetries: 0 });

async function health(e: FakeEngine): Promise<number> {
  return (await fetch(`${base(e)}/health`)).status;
}

async function waitFor(check: () => Promise<boolean> | boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function metric(e: FakeEngine, name: string): Promise<number> {
  const text = await (await fetch(`${base(e)}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`));
  if (!line) throw new Error(`no ${name} in /metrics`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('fake engine: loading and health', () => {
  it('answers /health 503 and refuses inference until the load time has passed, then 200', async () => {
    const started = Date.now();
    // Long enough that a busy machine still asks while the engine loads.
    const engine = await start({ loadTimeS: 3 });
    expect(await health(engine)).toBe(503);
    const refused = await fetch(`${base(engine)}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(refused.status).toBe(503);
    expect(await refused.json()).toMatchObject({ object: 'error', code: 503 });
    await waitFor(async () => (await health(engine)) === 200, 15_000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(2_900);
    expect(await (await fetch(`${base(engine)}/health`)).text()).toBe('');
  });
});

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

describe('fake engine: load and metrics', () => {
  it('counts running and waiting requests over --max-concurrency, and successes, under vLLM names', async () => {
    const engine = await start({ tokensPerSecond: 50, maxConcurrency: 1, servedModelNames: ['tiny'] });
    const text = await (await fetch(`${base(engine)}/metrics`)).text();
    for (const name of [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc',
      'vllm:gpu_cache_usage_perc',
      'vllm:request_success_total',
    ]) {
      expect(text).toContain(`${name}{model_name="tiny"} 0`);
    }
    const openai = client(engine);
    const slow = () => openai.completions.create({ model: 'tiny', prompt: 'p', max_tokens: 15 });
    const both = Promise.all([slow(), slow()]);
    await waitFor(async () => (await metric(engine, 'vllm:num_requests_waiting')) === 1);
    expect(await metric(engine, 'vllm:num_requests_running')).toBe(1);
    expect(await metric(engine, 'vllm:kv_cache_usage_perc')).toBe(1);
    await both;
    expect(await metric(engine, 'vllm:num_requests_running')).toBe(0);
    expect(await metric(engine, 'vllm:request_success_total')).toBe(2);
  });

  it('stops generating and frees the slot when a streaming client disconnects', async () => {
    const engine = await start({ tokensPerSecond: 20 });
    const controller = new AbortController();
    const res = await fetch(`${base(engine)}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'long', max_tokens: 1000, stream: true }),
      signal: controller.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    expect(await metric(engine, 'vllm:num_requests_running')).toBe(1);
    controller.abort();
    await waitFor(async () => (await metric(engine, 'vllm:num_requests_running')) === 0);
    expect(await metric(engine, 'vllm:request_success_total')).toBe(0);
  });
});

describe('fake engine: prefix cache and prefill', () => {
  const words = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ');
  const ask = (e: FakeEngine, system: string, user: string) =>
    client(e).chat.completions.create({
      model: 'fake/tiny',
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: user },
      ],
      max_tokens: 1,
    });
  const timed = async (e: FakeEngine, system: string, user: string) => {
    const t0 = performance.now();
    await ask(e, system, user);
    return performance.now() - t0;
  };

  it('prefills only what is not cached: a repeated long system prompt answers fast, and hits are counted in tokens', async () => {
    // 2,000 words at 10,000 a second: 200 ms to prefill from scratch, about 1 ms for the question alone.
    const e = await start({ prefillTokensPerSecond: 10_000, prefixCacheBlocks: 1000, blockSize: 16 });
    const system = words(2000, 's');
    const cold = await timed(e, system, 'first question here');
    const warm = await timed(e, system, 'second question here');
    expect(cold).toBeGreaterThanOrEqual(190);
    expect(warm).toBeLessThan(cold / 3);
    const queries = await metric(e, 'vllm:prefix_cache_queries_total');
    const hits = await metric(e, 'vllm:prefix_cache_hits_total');
    expect(queries).toBe(2 * 2003);
    // Whole blocks only: the system prompt's 2,000 words plus the role word fill 125 blocks.
    expect(hits).toBe(125 * 16);
  });

  it('forgets the least recently used prefixes past its capacity', async () => {
    const e = await start({ prefillTokensPerSecond: 0, prefixCacheBlocks: 15, blockSize: 16 });
    const hitsAfter = async (system: string) => {
      const before = await metric(e, 'vllm:prefix_cache_hits_total');
      await ask(e, system, 'q');
      return (await metric(e, 'vllm:prefix_cache_hits_total')) - before;
    };
    const [a, b] = [words(160, 'a'), words(160, 'b')];
    expect(await hitsAfter(a)).toBe(0);
    expect(await hitsAfter(a)).toBe(160);
    // a's ten blocks and b's ten do not both fit in fifteen: a's leading (oldest) blocks go.
    expect(await hitsAfter(b)).toBe(0);
    expect(await hitsAfter(b)).toBe(160);
    expect(await hitsAfter(a)).toBe(0);
  });

  it('queues prefills one after another, so time to first token grows with the work ahead', async () => {
    const e = await start({ prefillTokensPerSecond: 10_000, prefixCacheBlocks: 0 });
    const firstTokenAt = async (tag: string) => {
      const t0 = performance.now();
      const stream = await client(e).chat.completions.create({
        model: 'fake/tiny',
        messages: [{ role: 'user', content: words(1000, tag) }],
        max_tokens: 2,
        stream: true,
      });
      for await (const chunk of stream) if (chunk.choices[0]?.delta.content) return performance.now() - t0;
      return NaN;
    };
    const [one, two, three] = await Promise.all([firstTokenAt('x'), firstTokenAt('y'), firstTokenAt('z')]);
    const sorted = [one, two, three].sort((p, q) => p - q);
    // 100 ms of prefill each, served in turn.
    expect(sorted[0]).toBeGreaterThanOrEqual(95);
    expect(sorted[2]).toBeGreaterThanOrEqual(290);
  });

  it('takes the cache flags as vLLM spells --block-size', () => {
    const o = parseFakeEngineArgs([
      '--port',
      '1',
      '--prefill-tokens-per-second',
      '5000',
      '--prefix-cache-blocks',
      '512',
      '--block-size',
      '32',
    ]);
    expect(o).toMatchObject({ prefillTokensPerSecond: 5000, prefixCacheBlocks: 512, blockSize: 32 });
    expect(parseFakeEngineArgs(['--port', '1'])).toMatchObject({ prefillTokensPerSecond: 0, prefixCacheBlocks: 0, blockSize: 16 });
  });
});

describe('fake engine: multi-node', () => {
  it('is unhealthy until its worker joins, and for good once the worker leaves', async () => {
    const leader = await start({ nnodes: 2, leader: { host: '127.0.0.1', port: 0 } });
    expect(await health(leader)).toBe(503);
    const lost: string[] = [];
    const worker = await start(
      { nnodes: 2, nodeRank: 1, port: undefined, leader: { host: '127.0.0.1', port: leader.rendezvousPort as number } },
      { onLeaderLost: (reason: string) => lost.push(reason) },
    );
    expect(worker.port).toBe(0);
    await waitFor(async () => (await health(leader)) === 200);
    expect(worker.state()).toBe('ready');

    await worker.close(0);
    await waitFor(async () => (await health(leader)) === 503);
    expect(leader.state()).toBe('group-broken');
    expect(lost).toEqual([]);
  });

  it('tells a worker its leader is gone when the leader stops', async () => {
    const leader = await start({ nnodes: 2, leader: { host: '127.0.0.1', port: 0 } });
    const lost: string[] = [];
    const worker = await start(
      { nnodes: 2, nodeRank: 1, port: 0, leader: { host: '127.0.0.1', port: leader.rendezvousPort as number } },
      { onLeaderLost: (reason: string) => lost.push(reason) },
    );
    await waitFor(async () => (await health(worker)) === 200);
    await leader.close(0);
    await waitFor(() => lost.length === 1);
    expect(lost[0]).toContain('lost the leader');
  });
});

describe('fake engine: command line', () => {
  it('takes a vLLM-style argv and skips the flags it does not use', () => {
    const opts = parseFakeEngineArgs([
      'serve',
      'org/model-7b',
      '--served-model-name',
      'seven',
      '--port',
      '18000',
      '--tensor-parallel-size',
      '2',
      '--pipeline-parallel-size',
      '1',
      '--distributed-executor-backend',
      'ray',
      '--enforce-eager',
      '--max-model-len=4096',
      '--tokens-per-second',
      '30',
      '--hang',
    ]);
    expect(opts).toMatchObject({
      model: 'org/model-7b',
      servedModelNames: ['seven'],
      port: 18000,
      host: '127.0.0.1',
      maxModelLen: 4096,
      tokensPerSecond: 30,
      hang: true,
      loadTimeS: 0,
      maxConcurrency: 256,
    });
  });

  it('names the flag that is wrong', () => {
    expect(() => parseFakeEngineArgs(['--model', 'm'])).toThrow(/--port is required/);
    expect(() => parseFakeEngineArgs(['--port', 'eighty'])).toThrow(/--port must be an integer/);
    expect(() => parseFakeEngineArgs(['--port', '1', '--load-time', '-1'])).toThrow(/--load-time must be >= 0/);
    expect(() => parseFakeEngineArgs(['--port', '1', '--nnodes', '2'])).toThrow(FakeEngineArgsError);
    expect(() => parseFakeEngineArgs(['--nnodes', '2', '--node-rank', '1', '--leader', 'nocolon'])).toThrow(/HOST:PORT/);
  });
});

describe('fake engine: injected faults in the process', () => {
  function recordingProcess() {
    const out: string[] = [];
    const err: string[] = [];
    const exits: number[] = [];
    const signals = new Map<string, () => void>();
    const proc: FakeEngineProcess = {
      stdout: (l) => out.push(l),
      stderr: (l) => err.push(l),
      exit: (code) => exits.push(code),
      env: { CUDA_VISIBLE_DEVICES: '2,3' },
      onSignal: (s, h) => signals.set(s, h),
    };
    return { proc, out, err, exits, signals };
  }

  it('fails to start with exit code 2 and a line on stderr (--fail-start)', async () => {
    const p = recordingProcess();
    await runFakeEngine(['--port', '0', '--fail-start'], p.proc);
    expect(p.exits).toEqual([2]);
    expect(p.err.join('\n')).toMatch(/failed to load/);
    expect(p.out.join('\n')).toContain('CUDA_VISIBLE_DEVICES=2,3');
  });

  it('exits with code 3 after --crash-after, and 0 after SIGTERM', async () => {
    const p = recordingProcess();
    await runFakeEngine(['--port', '0', '--crash-after', '0.1'], p.proc);
    expect(p.out.join('\n')).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+/);
    await waitFor(() => p.exits.length > 0);
    expect(p.exits).toEqual([3]);
    expect(p.err.join('\n')).toMatch(/crash/);
    p.signals.get('SIGTERM')?.();
    await waitFor(() => p.exits.length > 1);
    expect(p.exits).toEqual([3, 0]);
  });

  it('fails /health with 500 after --unhealthy-after and never answers inference with --hang', async () => {
    const engine = await start({ unhealthyAfterS: 0.1, hang: true });
    expect(await health(engine)).toBe(200);
    await waitFor(async () => (await health(engine)) === 500);
    const hung = fetch(`${base(engine)}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'hi' }),
      signal: AbortSignal.timeout(300),
    });
    await expect(hung).rejects.toThrow();
  });
});
