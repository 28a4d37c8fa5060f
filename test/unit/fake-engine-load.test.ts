// The fake engine under load: running and waiting requests and successes under vLLM's metric names,
// slots freed when clients leave, and a prefix cache whose hits skip prefill, evicting the least
// recently used.
import { describe, expect, it } from 'vitest';
import { parseFakeEngineArgs } from '../../fake-engine/options.js';
import type { FakeEngine } from '../../fake-engine/server.js';
import { waitFor } from '../helpers/poll.js';
import { base, client, metric, start, useFakeEngineHarness } from '../helpers/fake-engine-harness.js';

useFakeEngineHarness();

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
