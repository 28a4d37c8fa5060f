// Wire-level helpers for checking an OpenAI-compatible engine as the router sees it: /health
// watched from the moment the engine starts, server-sent events split into their `data:` lines,
// a gauge read off /metrics. Only 127.0.0.1 is ever talked to.

/** Status 0: nothing listening yet (connection refused, or no answer within a second). */
export const REFUSED = 0;

/**
 * Polls /health every 10 ms until it answers 200 and returns what it answered before, runs
 * of the same status collapsed (e.g. [0, 503]). Throws when `gone()` says the engine died or
 * after `timeoutMs`.
 */
export async function healthUntilReady(
  base: string,
  timeoutMs: number,
  gone: () => string | undefined = () => undefined,
): Promise<number[]> {
  const seen: number[] = [];
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let status = REFUSED;
    try {
      const res = await fetch(`${base}/health`, { signal: AbortSignal.timeout(1000) });
      await res.arrayBuffer();
      status = res.status;
    } catch {
      // Not listening yet: the engine binds its port part-way through starting.
    }
    if (status === 200) return seen;
    if (seen.at(-1) !== status) seen.push(status);
    const why = gone();
    if (why !== undefined) throw new Error(`the engine stopped before it was ready: ${why}`);
    if (Date.now() > deadline) throw new Error(`not ready in ${timeoutMs} ms; /health answered ${seen.join(', ')}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export interface SseStream {
  status: number;
  contentType: string;
  /** Every event's payload, in order: the text after `data: `. */
  data: string[];
  /** Events that were not exactly one `data: ` line (comments, `event:` fields, …). */
  other: string[];
}

/** POSTs `body` and reads the whole event stream. */
export async function postSse(url: string, body: unknown): Promise<SseStream> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  const data: string[] = [];
  const other: string[] = [];
  for (const event of text.split(/\r?\n\r?\n/)) {
    if (event.trim() === '') continue;
    if (/^data: [^\n]*$/.test(event)) data.push(event.slice('data: '.length));
    else other.push(event);
  }
  return { status: res.status, contentType: res.headers.get('content-type') ?? '', data, other };
}

/** POSTs JSON and returns the status and the parsed (or raw, if not JSON) body. */
export async function postJson(url: string, body: unknown): Promise<{ status: number; raw: string; json: unknown }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const raw = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    json = undefined;
  }
  return { status: res.status, raw, json };
}

/** A sample's value from a Prometheus page, labelled or not; undefined when the page lacks it. */
export async function gauge(base: string, name: string): Promise<number | undefined> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}
