// One HTTP health probe of an engine. Agent side: the agent checks its engines locally and
// tells the control plane only about transitions, so a probe must be cheap and bounded.
import { Agent, request, type ClientRequest } from 'node:http';
import { request as undiciRequest } from 'undici';
import { pinnedDispatcher } from '../../../common/engine-tls.js';

export type ProbeResult = { ok: true } | { ok: false; error: string };

/**
 * Probes reuse one idle connection per engine: a fresh TCP connection every second per engine
 * cost more CPU than the probe itself (on a 200-host simulated fleet, 400 connects a second).
 * One free socket per engine at most, so nothing grows; an engine that goes away takes its
 * socket with it (the pool drops a closed socket).
 */
const keepAlive = new Agent({ keepAlive: true, maxFreeSockets: 1, scheduling: 'lifo' });

/**
 * GET `url`; ok only on a 200 within `timeoutMs`. With `pin` (an engine started with
 * --engine-tls) over https, and only from the certificate the agent issued it.
 */
export async function probeHealth(url: string, timeoutMs: number, pin?: string): Promise<ProbeResult> {
  if (pin !== undefined) return probePinned(url, timeoutMs, pin);
  const first = await probeOnce(url, timeoutMs, keepAlive);
  // An engine may close an idle connection just as a probe reuses it: that says nothing of its
  // health, so such a failure is asked again on a fresh connection before it counts.
  if (!first.ok && first.reusedSocketFailed) return probeOnce(url, timeoutMs, false);
  return first.ok ? { ok: true } : { ok: false, error: first.error };
}

type Attempt = { ok: true } | { ok: false; error: string; reusedSocketFailed: boolean };

function probeOnce(url: string, timeoutMs: number, agent: Agent | false): Promise<Attempt> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (result: Attempt) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(result);
    };
    const req: ClientRequest = request(url, { method: 'GET', agent }, (res) => {
      res.resume();
      const status = res.statusCode ?? 0;
      done(status === 200 ? { ok: true } : { ok: false, error: `GET ${url} answered ${status}`, reusedSocketFailed: false });
    });
    const timer = setTimeout(() => {
      done({ ok: false, error: `GET ${url} did not answer within ${timeoutMs} ms`, reusedSocketFailed: false });
      // A connection that did not answer is not one to reuse.
      req.destroy();
    }, timeoutMs);
    req.on('error', (err: NodeJS.ErrnoException) => {
      const reusedSocketFailed = req.reusedSocket === true && (err.code === 'ECONNRESET' || err.code === 'EPIPE');
      done({ ok: false, error: `GET ${url}: ${err.message}`, reusedSocketFailed });
    });
    req.end();
  });
}

async function probePinned(url: string, timeoutMs: number, pin: string): Promise<ProbeResult> {
  try {
    const res = await undiciRequest(url, {
      dispatcher: pinnedDispatcher(pin),
      signal: AbortSignal.timeout(timeoutMs),
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    await res.body.dump();
    return res.statusCode === 200 ? { ok: true } : { ok: false, error: `GET ${url} answered ${res.statusCode}` };
  } catch (err) {
    return { ok: false, error: `GET ${url}: ${(err as Error).message}` };
  }
}

/** The address to probe an engine bound to `host`: a wildcard bind is reached on loopback. */
export function probeHost(host: string): string {
  if (host === '' || host === '0.0.0.0') return '127.0.0.1';
  if (host === '::' || host === '[::]') return '::1';
  return host;
}
