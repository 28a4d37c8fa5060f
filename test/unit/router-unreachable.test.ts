// The scraper against an engine behind a real TCP black hole on loopback (the router's side of a
// partition: packets dropped, no reset) and against one whose metrics page is merely slow: the
// first is ejected within seconds and comes back when it answers again, the second stays in.
import { afterEach, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { Worker } from 'node:worker_threads';
import { Endpoint } from '../../router/engines/endpoint.js';
import { reachable, tcpAddress } from '../../router/engines/reachability.js';
import { DEFAULT_SCRAPER, Scraper } from '../../router/engines/scraper.js';
import { createUpstreamPool, DEFAULT_UPSTREAM } from '../../router/engines/upstream.js';

const METRICS = 'vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.1\n';

/**
 * An engine in a worker thread that answers its first /metrics and then stops its thread (an
 * Atomics.wait: no CPU, no accept): the connection the router keeps alive gets no answer, and
 * once the test has filled the listen queue, new connections' SYNs are dropped by the kernel.
 * No root and no namespace needed; `heal` lets it go on serving.
 */
const ENGINE = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const stopped = new Int32Array(workerData);
let answered = 0;
const server = http.createServer((req, res) => {
  res.end(${JSON.stringify(METRICS)});
  if (++answered === 1) res.on('finish', () => { parentPort.postMessage('stopped'); Atomics.wait(stopped, 0, 0); });
});
server.listen({ host: '127.0.0.1', port: 0, backlog: 1 }, () => parentPort.postMessage(server.address().port));
`;

interface BlackHole {
  url: string;
  /** Resolves once the engine has answered once and stopped, and its listen queue is full. */
  cut: Promise<void>;
  heal(): void;
  close(): Promise<void>;
}

function connects(port: number, timeoutMs: number): Promise<Socket | undefined> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(undefined);
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      resolve(socket);
    });
    socket.once('error', () => {
      clearTimeout(timer);
      resolve(undefined);
    });
  });
}

async function blackHole(): Promise<BlackHole> {
  const flag = new SharedArrayBuffer(4);
  const worker = new Worker(ENGINE, { eval: true, workerData: flag });
  const port = await new Promise<number>((resolve) => worker.once('message', resolve));
  const fillers: Socket[] = [];
  const cut = (async () => {
    await new Promise((resolve) => worker.once('message', resolve));
    // Connections nobody accepts wait in the listen queue; once it is full, SYNs are dropped.
    for (let i = 0; i < 16; i++) {
      const socket = await connects(port, 300);
      if (socket === undefined) return;
      fillers.push(socket);
    }
    throw new Error('the listen queue never filled');
  })();
  const heal = (): void => {
    for (const socket of fillers) socket.destroy();
    Atomics.store(new Int32Array(flag), 0, 1);
    Atomics.notify(new Int32Array(flag), 0);
  };
  return {
    url: `http://127.0.0.1:${port}`,
    cut,
    heal,
    async close() {
      heal();
      await worker.terminate();
    },
  };
}

async function until(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function scraped(url: string): { endpoint: Endpoint; failures: () => number; ejectedAt: () => number } {
  const pool = createUpstreamPool(url, DEFAULT_UPSTREAM);
  const endpoint = new Endpoint(url, pool);
  let failures = 0;
  let ejectedAt = NaN;
  const scraper = new Scraper(
    () => [endpoint],
    DEFAULT_SCRAPER,
    (e) => {
      failures++;
      if (e.recordFailure(performance.now())) ejectedAt = performance.now();
    },
  );
  scraper.start();
  cleanups.push(async () => {
    scraper.stop();
    await pool.destroy();
  });
  return { endpoint, failures: () => failures, ejectedAt: () => ejectedAt };
}

describe('an engine the router cannot reach', () => {
  it('tells a black hole from a listening port and a closed one with a fresh connection', async () => {
    const hole = await blackHole();
    cleanups.push(() => hole.close());
    expect(await reachable(hole.url)).toBe(true);
    // Stop the engine: its first answer, then nothing.
    await fetch(`${hole.url}/metrics`).then((r) => r.text());
    await hole.cut;
    const startedAt = performance.now();
    expect(await reachable(hole.url, 500)).toBe(false);
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(450);
    hole.heal();
    // SYNs sent before the engine's thread has emptied its listen queue are still dropped.
    let back = false;
    for (let tries = 0; tries < 5 && !back; tries++) back = await reachable(hole.url);
    expect(back).toBe(true);
    // Nobody listening: refused at once.
    await hole.close();
    expect(await reachable(hole.url)).toBe(false);
    expect(tcpAddress('https://[::1]:8443')).toEqual({ host: '::1', port: 8443 });
    expect(tcpAddress('https://engine.example')).toEqual({ host: 'engine.example', port: 443 });
  });

  it('is not judged unreachable when the router’s own event loop stalls past the probe’s timeout', async () => {
    const server = createServer((_req, res) => res.end());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const { port } = server.address() as AddressInfo;
    const probe = reachable(`http://127.0.0.1:${port}`, 100);
    // Busy for three times the timeout: the connect opened meanwhile and must be seen first.
    const until = performance.now() + 300;
    while (performance.now() < until);
    expect(await probe).toBe(true);
  });

  it('is ejected within seconds of a partition, and comes back once it answers again', async () => {
    const hole = await blackHole();
    cleanups.push(() => hole.close());
    const { endpoint, ejectedAt } = scraped(hole.url);
    // The first scrape is answered and leaves a kept-alive connection; then the engine goes silent.
    await hole.cut;
    const cutAt = performance.now();
    expect(endpoint.reportsLoad()).toBe(true);
    await until('the endpoint ejected', () => endpoint.ejected, 10_000);
    const seconds = (ejectedAt() - cutAt) / 1000;
    console.log(`router-unreachable: ejected ${seconds.toFixed(1)} s after the cut (a kept-alive connection)`);
    expect(seconds).toBeLessThan(6);
    expect(endpoint.available(performance.now())).toBe(false);
    hole.heal();
    await until('the endpoint back in rotation', () => !endpoint.ejected, 10_000);
    expect(endpoint.available(performance.now())).toBe(true);
  }, 30_000);

  it('is ejected as fast when every scrape needs a new connection, which cannot open', async () => {
    const hole = await blackHole();
    cleanups.push(() => hole.close());
    // Someone else had the engine's one answer: the router's pool has no connection there.
    await fetch(`${hole.url}/metrics`).then((r) => r.text());
    await hole.cut;
    const startedAt = performance.now();
    const { endpoint, ejectedAt } = scraped(hole.url);
    await until('the endpoint ejected', () => endpoint.ejected, 10_000);
    const seconds = (ejectedAt() - startedAt) / 1000;
    console.log(`router-unreachable: ejected ${seconds.toFixed(1)} s after the first scrape (new connections)`);
    // A scrape's timeout counts from the ask: not the pool's 3 s connect timeout and then probes.
    expect(seconds).toBeLessThan(5);
  }, 30_000);

  it('is not ejected for a metrics page slower than the scrape timeout', async () => {
    let answered = 0;
    const slow: Server = createServer((_req, res) => {
      // Past the scrape's 800 ms: every scrape times out, as under heavy load.
      setTimeout(() => {
        answered++;
        res.end(METRICS);
      }, 1500).unref();
    });
    await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => slow.close(() => resolve())));
    cleanups.push(() => void slow.closeAllConnections());
    const { port } = slow.address() as AddressInfo;
    const { endpoint, failures } = scraped(`http://127.0.0.1:${port}`);
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    expect(answered).toBeGreaterThan(0);
    expect(endpoint.reportsLoad()).toBe(false);
    expect(failures()).toBe(0);
    expect(endpoint.ejected).toBe(false);
  }, 30_000);
});
