// A GET of one file's bytes from an offset over plain node:http(s): a range request, redirects
// followed (the hub sends LFS files to a CDN) with the token kept to the first origin, and a
// connection that sends nothing for a minute cut. Any source served over HTTP can use it. Agent
// side; the download thread's (download.ts) only network code.
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';

/** A response body from `from` on: the offset asked for, or 0 when the server ignored the range. */
export interface BodyFrom {
  from: number;
  body: IncomingMessage;
}

// node:http, not undici nor fetch: its C++ parser hands each socket read (64 KB) to JavaScript
// as it is, where undici copies it through a WebAssembly parser and a stream of its own. 500 MB,
// 4 files at a time, hashed and written: 1.40-1.46 CPU-seconds against 1.74-1.79 with undici's
// request() (docs/weights.md, "Figures").
const agents = {
  http: new http.Agent({ keepAlive: true, maxSockets: 16 }),
  https: new https.Agent({ keepAlive: true, maxSockets: 16 }),
};

/** A connection that sends nothing for this long is cut; the fetch's retry resumes from disk. */
const IDLE_TIMEOUT_MS = 60_000;
const MAX_REDIRECTS = 5;

/**
 * The bytes of `url` from `offset` on. `authorization` goes to `url`'s origin only, never to
 * where it redirects. A status other than 200 or 206 throws an Error with `statusCode`.
 */
export async function getFrom(url: string, authorization: string | undefined, offset: number, signal: AbortSignal): Promise<BodyFrom> {
  const headers: Record<string, string> = {
    'user-agent': 'llmgw',
    ...(offset > 0 ? { range: `bytes=${offset}-` } : {}),
    ...(authorization !== undefined ? { authorization } : {}),
  };
  const response = await getFollowingRedirects(new URL(url), headers, signal);
  const status = response.statusCode ?? 0;
  if (status === 206 && offset > 0 && String(response.headers['content-range'] ?? '').startsWith(`bytes ${offset}-`)) {
    return { from: offset, body: response };
  }
  if (status === 200) return { from: 0, body: response };
  const said = (await textOf(response).catch(() => '')).slice(0, 300);
  throw Object.assign(new Error(`${url}: HTTP ${status} ${said}`), { statusCode: status });
}

async function getFollowingRedirects(url: URL, headers: Record<string, string>, signal: AbortSignal): Promise<IncomingMessage> {
  const origin = url.origin;
  for (let hops = 0; ; hops++) {
    const response = await get(url, url.origin === origin ? headers : withoutAuthorization(headers), signal);
    const location = response.headers.location;
    if (![301, 302, 303, 307, 308].includes(response.statusCode ?? 0) || location === undefined) return response;
    response.resume();
    if (hops === MAX_REDIRECTS) throw new Error(`${origin}${url.pathname}: more than ${MAX_REDIRECTS} redirects`);
    url = new URL(location, url);
  }
}

function get(url: URL, headers: Record<string, string>, signal: AbortSignal): Promise<IncomingMessage> {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return Promise.reject(new Error(`${url.href}: not an http(s) URL`));
  const secure = url.protocol === 'https:';
  return new Promise((resolve, reject) => {
    const options = { agent: secure ? agents.https : agents.http, headers, signal, timeout: IDLE_TIMEOUT_MS };
    const request = (secure ? https : http).get(url, options, resolve);
    request.on('error', reject);
    request.on('timeout', () => request.destroy(new Error(`${url.host} sent nothing for ${IDLE_TIMEOUT_MS / 1000} s`)));
  });
}

function withoutAuthorization(headers: Record<string, string>): Record<string, string> {
  const { authorization: _, ...rest } = headers;
  return rest;
}

async function textOf(response: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of response as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}
