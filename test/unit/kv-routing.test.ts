// Precise KV-aware routing end to end on loopback: fake engines publishing vLLM-format KV-cache
// events over ZeroMQ, a router following them, and what it does when a replica evicts a prefix
// or its event stream goes away and comes back.
import { afterEach, describe, expect, it } from 'vitest';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { parseKvEventsConfig } from '../../fake-engine/kv-events.js';
import { parseFakeEngineArgs } from '../../fake-engine/options.js';
import { KvIndex, blockKey } from '../../router/kv/block-index.js';
import { asTaggedArray, parseKvEventsSpec } from '../../router/kv/events.js';
import { StaticRouteSource } from '../../router/routes/table.js';
import { startRouter, type Router } from '../../router/http/server.js';

const words = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ');
const SYSTEM = words(40, 'sys');
const chat = (system: string, question: string) =>
  JSON.stringify({
    model: 'demo',
    messages: [
      { role: 'system', content: system },
      { role: 'user', content: question },
    ],
    max_tokens: 2,
  });

let engines: FakeEngine[] = [];
let router: Router | undefined;

afterEach(async () => {
  await router?.close(100);
  router = undefined;
  await Promise.all(engines.map((e) => e.close(100)));
  engines = [];
});

async function setup(): Promise<{ urls: string[]; router: Router }> {
  engines = await Promise.all(
    [0, 1].map(() =>
      startFakeEngine(
        fakeEngineOptions({
          model: 'demo',
          // 24 blocks of 4 words: the 11-block system prompt and one more prompt like it.
          prefixCacheBlocks: 24,
          blockSize: 4,
          kvEvents: { endpoint: 'tcp://127.0.0.1:*', topic: '' },
        }),
      ),
    ),
  );
  const urls = engines.map((e) => `http://127.0.0.1:${e.port}`);
  const byUrl = new Map(urls.map((u, i) => [u, (engines[i] as FakeEngine).kvEvents?.address]));
  router = await startRouter({
    source: new StaticRouteSource(urls.map((endpoint) => ({ servedName: 'demo', endpoint }))),
    port: 0,
    kvEvents: (url) => byUrl.get(url),
    log: () => {},
  });
  return { urls, router };
}

async function post(base: string, body: string): Promise<number> {
  const res = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  await res.text();
  return res.status;
}

async function served(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/^vllm:request_success_total\{[^}]*\} (\S+)$/m.exec(text)?.[1]);
}

/** Polls `check` every 20 ms for up to `ms`; the time it took, or Infinity. */
async function within(ms: number, check: () => boolean): Promise<number> {
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    if (check()) return performance.now() - t0;
    await new Promise((r) => setTimeout(r, 20));
  }
  return check() ? performance.now() - t0 : Infinity;
}

/**
 * Sends fresh prompts to each engine until the router hears its events (a batch published before
 * a subscription lands is lost, as with any ZeroMQ subscriber); whether all became live.
 */
async function untilLive(r: Router, urls: string[]): Promise<boolean> {
  for (let i = 0; i < 50; i++) {
    const down = urls.filter((u) => r.health().kvEvents?.[u] !== 'live');
    if (down.length === 0) return true;
    for (const u of down) await post(u, chat(words(8, `wake${i}-`), 'x'));
    await within(100, () => urls.every((u) => r.health().kvEvents?.[u] === 'live'));
  }
  return false;
}

/**
 * Two engines behind a router, once every event stream is live (each engine has stored something,
 * so its block size is known): the router, its base URL, and engines A and B by URL.
 */
async function liveStack(): Promise<{ r: Router; base: string; a: string; b: string }> {
  const { urls, router: r } = await setup();
  expect(await untilLive(r, urls)).toBe(true);
  const [a, b] = urls as [string, string];
  return { r, base: `http://127.0.0.1:${r.port}`, a, b };
}

describe('precise KV-aware routing', () => {
  it('does not send a request for a prefix to the replica that evicted it', async () => {
    const { base, a, b } = await liveStack();

    // The prefix is cached on A only: the router follows it there.
    await post(a, chat(SYSTEM, 'first question'));
    await new Promise((res) => setTimeout(res, 100));
    const before = await served(a);
    expect(await post(base, chat(SYSTEM, 'second question'))).toBe(200);
    expect(await served(a)).toBe(before + 1);

    // A's cache fills with other prompts until the prefix is evicted; B computes it meanwhile.
    for (let i = 0; i < 3; i++) await post(a, chat(words(40, `filler${i}-`), 'x'));
    await post(b, chat(SYSTEM, 'on b'));
    await new Promise((res) => setTimeout(res, 100));
    const [servedA, servedB] = [await served(a), await served(b)];
    for (let i = 0; i < 3; i++) expect(await post(base, chat(SYSTEM, `after eviction ${i}`))).toBe(200);
    expect(await served(a)).toBe(servedA);
    expect(await served(b)).toBe(servedB + 3);
  });

  it('falls back within a second when an engine stream stops, and recovers when it returns, with no request failing', async () => {
    const { r, base, a } = await liveStack();

    const publisher = (engines[0] as FakeEngine).kvEvents;
    publisher?.stop();
    const fellBack = await within(1000, () => r.health().kvEvents?.[a] !== 'live');
    expect(fellBack).toBeLessThan(1000);
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) statuses.push(await post(base, chat(SYSTEM, `while down ${i}`)));

    await publisher?.start();
    // Work there makes the engine publish again; the first batch heard after the drop is trusted.
    expect(await untilLive(r, [a])).toBe(true);
    for (let i = 0; i < 10; i++) statuses.push(await post(base, chat(SYSTEM, `after ${i}`)));
    expect(statuses.every((s) => s === 200)).toBe(true);
  });
});

describe('precise KV-aware routing across an engine restart', () => {
  it('scores the restarted engine by its homes until it publishes, then by its (empty) cache, with no request failing', async () => {
    const { r, base, a, b } = await liveStack();
    await post(a, chat(SYSTEM, 'warm a'));

    // Engine A goes away and a new one (empty cache, events counting from 0) takes its ports.
    const old = engines[0] as FakeEngine;
    const kvAddress = old.kvEvents?.address as string;
    await old.close(100);
    expect(await within(1000, () => r.health().kvEvents?.[a] !== 'live')).toBeLessThan(1000);
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push(await post(base, chat(SYSTEM, `while a is away ${i}`)));
    engines[0] = await startFakeEngine(
      fakeEngineOptions({
        model: 'demo',
        port: old.port,
        prefixCacheBlocks: 24,
        blockSize: 4,
        kvEvents: { endpoint: kvAddress, topic: '' },
      }),
    );
    // It is trusted again from its first batch the router hears: work there makes batches.
    expect(await untilLive(r, [a])).toBe(true);
    // The new A holds no system prompt: B, which does, gets it.
    await post(b, chat(SYSTEM, 'b has it'));
    await new Promise((res) => setTimeout(res, 100));
    const servedA = await served(a);
    for (let i = 0; i < 3; i++) statuses.push(await post(base, chat(SYSTEM, `after restart ${i}`)));
    expect(await served(a)).toBe(servedA);
    expect(statuses.every((s) => s === 200)).toBe(true);
  });
});

describe('KV events: parsing and the index', () => {
  it('reads vLLM --kv-events-config and the router --kv-events spec', () => {
    expect(parseKvEventsConfig('{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv"}')).toEqual({
      endpoint: 'tcp://*:5557',
      topic: 'kv',
    });
    expect(parseKvEventsConfig('{"enable_kv_cache_events":true,"publisher":"null"}')).toBeUndefined();
    const argv = ['serve', 'demo', '--port', '18000', '--kv-events-config', '{"enable_kv_cache_events":true,"publisher":"zmq"}'];
    expect(parseFakeEngineArgs(argv).kvEvents).toEqual({ endpoint: 'tcp://*:5557', topic: '' });
    expect(() => parseFakeEngineArgs(['--port', '1', '--kv-events-config', 'nope'])).toThrow(/must be JSON/);
    expect(() => parseKvEventsConfig('{"enable_kv_cache_events":"yes"}')).toThrow(/enable_kv_cache_events/);
    expect(parseKvEventsSpec('+1000')?.('http://10.0.0.1:18000')).toBe('tcp://10.0.0.1:19000');
    expect(parseKvEventsSpec('5557')?.('http://gpu-7:8000')).toBe('tcp://gpu-7:5557');
    expect(parseKvEventsSpec('off')).toBeUndefined();
    expect(() => parseKvEventsSpec('tcp://x')).toThrow(/--kv-events/);
  });

  it('reads events as vLLM 0.34 sends them (maps tagged by type) and as older vLLM and the fake do (tagged arrays)', () => {
    expect(
      asTaggedArray({ type: 'BlockStored', block_hashes: [7, 8], parent_block_hash: null, token_ids: [1], block_size: 16, lora_id: null }),
    ).toEqual(['BlockStored', [7, 8], null, [1], 16]);
    expect(asTaggedArray({ type: 'AllBlocksCleared' })?.[0]).toBe('AllBlocksCleared');
    expect(asTaggedArray(['BlockRemoved', [7]])).toEqual(['BlockRemoved', [7]]);
    expect(asTaggedArray({ block_hashes: [7] })).toBeUndefined();
    expect(asTaggedArray('BlockStored')).toBeUndefined();
  });

  it('matches only a leading run of blocks, and forgets the oldest past its bound', () => {
    const index = new KvIndex(3);
    for (const h of [1, 2, 3]) index.add(h);
    expect(index.matched([1, 2, 3, 4])).toBe(3);
    expect(index.matched([2, 3])).toBe(2);
    index.remove(2);
    expect(index.matched([1, 2, 3])).toBe(1);
    index.add(4);
    index.add(5);
    expect(index.size).toBe(3);
    expect(index.has(1)).toBe(false);
    expect(blockKey(2n ** 60n + 5n)).toBe(5);
    expect(blockKey(Uint8Array.from([0, 0, 0, 0, 1, 2, 9, 9]))).toBe(258);
  });
});

describe('load before locality', () => {
  class Engine {
    inflight = 0;
    readonly costs = { bytesPerToken: 4, serviceMs: 80, prefillMsPerToken: 0.04, prefillMs: 2 };
    constructor(readonly url: string) {}
    score(): number {
      return this.inflight;
    }
    load(): number {
      return this.inflight;
    }
    available(): boolean {
      return true;
    }
    queued(): number {
      return Math.max(0, this.inflight + 1 - 4);
    }
    concurrency(): number {
      return 4;
    }
    reportsLoad(): boolean {
      return true;
    }
  }

  it('keeps a hot prefix home while a slot is free, spreads it once the queue costs more than a prefill elsewhere, and brings it back when load falls', async () => {
    const { AffinityTable } = await import('../../router/policies/affinity-table.js');
    const all = [0, 1, 2, 3].map((i) => new Engine(`http://127.0.0.1:${i}`));
    const table = new AffinityTable<Engine>();
    // A 1,500-token prompt: a miss costs 2 x 60 ms elsewhere, 60 ms on a prefix home (half of
    // it taken as cached); each request queued at home 80 / 4 = 20 ms.
    const shape = { promptBytes: 6000 };
    const home = table.pick(-1, 7, all, 0, shape) as Engine;
    home.inflight = 4;
    expect(table.pick(-1, 7, all, 0, shape)).toBe(home);
    home.inflight = 5;
    expect(table.pick(-1, 7, all, 0, shape)).toBe(home);
    home.inflight = 8;
    const second = table.pick(-1, 7, all, 0, shape) as Engine;
    expect(second).not.toBe(home);
    expect(table.result).toBe('diverted');
    expect(table.homesOf(7)).toEqual([home, second]);
    // Both homes: the less loaded takes it; idle again, the first home does.
    second.inflight = 2;
    expect(table.pick(-1, 7, all, 0, shape)).toBe(second);
    home.inflight = 0;
    second.inflight = 0;
    expect(table.pick(-1, 7, all, 0, shape)).toBe(home);
  });
});
