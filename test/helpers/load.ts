// Steady load through a router for end-to-end tests: clients sending plain and streamed chat
// requests, each outcome recorded (which engine served it, whether a stream ended cleanly).
import { request } from 'undici';

export interface Sample {
  start: number;
  end: number;
  ok: boolean;
  stream: boolean;
  endpoint: string;
  error: string;
}

export interface LoadOptions {
  routerUrl: string;
  model: string;
  /** Clients sending plain requests (a few tokens each). */
  plainClients?: number;
  /** Clients sending long streams. */
  streamClients?: number;
  /** Clients alternating plain requests and streams; neighbouring clients start with different kinds. */
  mixedClients?: number;
  /** Tokens per stream (its duration is this over the engine's token rate). */
  streamTokens?: number;
  /** Each client starts a request at most this often (default: back to back). */
  everyMs?: number;
  /** A request that has no headers or body for this long fails (default 120 s). */
  timeoutMs?: number;
}

export interface Load {
  samples: Sample[];
  stop(): Promise<Sample[]>;
}

export function startLoad(options: LoadOptions): Load {
  const samples: Sample[] = [];
  let running = true;
  const one = async (stream: boolean): Promise<void> => {
    const start = Date.now();
    try {
      const response = await request(`${options.routerUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: options.model,
          stream,
          max_tokens: stream ? (options.streamTokens ?? 8) : 4,
          messages: [{ role: 'user', content: `hello ${start}` }],
        }),
        bodyTimeout: options.timeoutMs ?? 120_000,
        headersTimeout: options.timeoutMs ?? 120_000,
      });
      const text = await response.body.text();
      const ok = response.statusCode === 200 && (!stream || (text.includes('data: [DONE]') && !text.includes('"error"')));
      samples.push({
        start,
        end: Date.now(),
        ok,
        stream,
        endpoint: String(response.headers['x-llmgw-endpoint'] ?? ''),
        error: ok ? '' : `${response.statusCode} ${text.slice(0, 200)}`,
      });
    } catch (error) {
      samples.push({ start, end: Date.now(), ok: false, stream, endpoint: '', error: String(error) });
    }
  };
  // Each client says, for its n-th request, whether that one is a stream.
  const streamsAt: ((n: number) => boolean)[] = [
    ...Array.from({ length: options.plainClients ?? 2 }, () => () => false),
    ...Array.from({ length: options.streamClients ?? 0 }, () => () => true),
    ...Array.from({ length: options.mixedClients ?? 0 }, (_, i) => (n: number) => (n + i) % 2 === 0),
  ];
  const clients = streamsAt.map(async (streamAt) => {
    for (let n = 0; running; n++) {
      const started = Date.now();
      await one(streamAt(n));
      const rest = started + (options.everyMs ?? 0) - Date.now();
      if (rest > 0 && running) await new Promise((r) => setTimeout(r, rest));
    }
  });
  return {
    samples,
    async stop() {
      running = false;
      await Promise.all(clients);
      return samples;
    },
  };
}

export function summarise(samples: Sample[]): string {
  const failed = samples.filter((s) => !s.ok);
  const streams = samples.filter((s) => s.stream);
  return `${samples.length} requests (${streams.length} streams, longest ${Math.max(0, ...streams.map((s) => s.end - s.start))} ms), ${failed.length} failed${
    failed.length
      ? `: ${failed
          .slice(0, 3)
          .map((f) => f.error)
          .join(' | ')}`
      : ''
  }`;
}

/** Runs `options` load for `ms` and returns its samples, having checked that none failed. */
export async function servedWithoutFailure(options: LoadOptions, ms: number): Promise<Sample[]> {
  // Imported here: bench:faults loads this file outside vitest, which refuses a require().
  const { expect } = await import('vitest');
  const load = startLoad(options);
  await new Promise((resolve) => setTimeout(resolve, ms));
  const samples = await load.stop();
  expect(
    samples.filter((s) => !s.ok),
    summarise(samples),
  ).toEqual([]);
  return samples;
}
