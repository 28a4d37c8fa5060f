// The load generator of `npm run bench:fairness` (bench/fairness.ts), run in its own process: one
// or more streams of streaming chat requests, each under one tenant's API key, open loop (Poisson
// arrivals at a rate, so a saturated router cannot slow the sender down) or closed loop (a number
// of connections each sending its next request when its last is answered). For every request it
// records the time from send to the first token chunk (time to first token), or, for a refusal,
// the time to the answer and its error code.
import { setMaxListeners } from 'node:events';
import { Pool } from 'undici';

export interface LoadStream {
  /** What the report calls it. */
  name: string;
  key: string;
  /** Poisson arrivals at this many requests per second… */
  rps?: number;
  /** …or this many connections in a closed loop. */
  connections?: number;
  maxTokens: number;
  /** A deadline for the first token (`x-llmgw-slo-ttft-ms`) on every request of the stream. */
  ttftDeadlineMs?: number;
}

export interface LoadJob {
  base: string;
  model: string;
  durationMs: number;
  /** How long to wait after the window for answers still coming before giving up on them. */
  drainMs: number;
  streams: LoadStream[];
}

export interface StreamResult {
  name: string;
  sent: number;
  /** Times to first token of the requests answered 200, ms. */
  ttfts: number[];
  /** Requests answered 200 whose first token came within their deadline. */
  metDeadline: number;
  /** Refusals (non-200 answers) by error code. */
  refused: Record<string, number>;
  /** Time from send to a refusal's answer, ms. */
  refusedMs: number[];
  /** Requests still unanswered when the drain ended, or whose connection failed. */
  unfinished: number;
  /** Requests answered 200 and finished, per second of the window. */
  throughput: number;
}

const CONTENT_MARK = Buffer.from('{"content":');
/** Open-loop senders keep at most this many requests open (a bound on sockets, far above a phase's line). */
const OPEN_CONNECTIONS = 512;

/** Exponentially distributed gap, ms, for Poisson arrivals at `rps`. */
function gapMs(rps: number): number {
  return (-Math.log(1 - Math.random()) / rps) * 1000;
}

export async function runLoad(job: LoadJob): Promise<StreamResult[]> {
  const started = performance.now();
  const end = started + job.durationMs;
  const controller = new AbortController();
  // Every open request listens to it.
  setMaxListeners(100_000, controller.signal);
  const pending: Array<Promise<void>> = [];
  // Answers still coming after the window are waited for a bounded time, then cut (counted as unfinished).
  const timer = setTimeout(() => controller.abort(), job.durationMs + job.drainMs);
  const runs = job.streams.map((stream) => {
    const pool = new Pool(job.base, { connections: stream.connections ?? OPEN_CONNECTIONS, pipelining: 1, keepAliveTimeout: 10_000 });
    const r: StreamResult = {
      name: stream.name,
      sent: 0,
      ttfts: [],
      metDeadline: 0,
      refused: {},
      refusedMs: [],
      unfinished: 0,
      throughput: 0,
    };
    let finishedInWindow = 0;
    const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${stream.key}` };
    if (stream.ttftDeadlineMs !== undefined) headers['x-llmgw-slo-ttft-ms'] = String(stream.ttftDeadlineMs);
    const one = async (): Promise<void> => {
      r.sent++;
      // A fresh prompt each time: no engine prefix cache shortens a prefill.
      const body = JSON.stringify({
        model: job.model,
        messages: [{ role: 'user', content: `${r.sent} ${Math.random()} How fair is the router to tenants who send little?` }],
        max_tokens: stream.maxTokens,
        stream: true,
      });
      const t0 = performance.now();
      try {
        const res = await pool.request({ path: '/v1/chat/completions', method: 'POST', headers, body, signal: controller.signal });
        if (res.statusCode !== 200) {
          const text = await res.body.text();
          r.refusedMs.push(performance.now() - t0);
          const code = /"code":"([^"]+)"/.exec(text)?.[1] ?? `http_${res.statusCode}`;
          r.refused[code] = (r.refused[code] ?? 0) + 1;
          return;
        }
        let ttft = -1;
        for await (const chunk of res.body as AsyncIterable<Buffer>) {
          if (ttft < 0 && chunk.indexOf(CONTENT_MARK) >= 0) ttft = performance.now() - t0;
        }
        if (ttft < 0) {
          r.unfinished++;
          return;
        }
        r.ttfts.push(ttft);
        if (stream.ttftDeadlineMs !== undefined && ttft <= stream.ttftDeadlineMs) r.metDeadline++;
        if (performance.now() <= end) finishedInWindow++;
      } catch {
        r.unfinished++;
      }
    };
    let sender: Promise<void>;
    if (stream.connections !== undefined) {
      const worker = async () => {
        while (performance.now() < end) await one();
      };
      sender = Promise.all(Array.from({ length: stream.connections }, worker)).then(() => undefined);
    } else {
      const rps = stream.rps ?? 1;
      sender = (async () => {
        let next = performance.now() + gapMs(rps);
        while (next < end) {
          const wait = next - performance.now();
          if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
          pending.push(one());
          next += gapMs(rps);
        }
      })();
    }
    return {
      r,
      pool,
      done: sender,
      close: () => {
        r.throughput = finishedInWindow / (job.durationMs / 1000);
      },
    };
  });
  await Promise.all(runs.map((x) => x.done));
  await Promise.allSettled(pending);
  clearTimeout(timer);
  for (const x of runs) {
    x.close();
    await x.pool.close().catch(() => undefined);
  }
  return runs.map((x) => x.r);
}
