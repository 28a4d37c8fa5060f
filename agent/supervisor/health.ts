// One HTTP health probe of an engine. Agent side: the agent checks its engines locally and
// tells the control plane only about transitions, so a probe must be cheap and bounded.
import { request } from 'node:http';

export type ProbeResult = { ok: true } | { ok: false; error: string };

/** GET `url`; ok only on a 200 within `timeoutMs`. A fresh connection each time (no pool to leak). */
export function probeHealth(url: string, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (result: ProbeResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(result);
    };
    const req = request(url, { method: 'GET', agent: false }, (res) => {
      res.resume();
      const status = res.statusCode ?? 0;
      done(status === 200 ? { ok: true } : { ok: false, error: `GET ${url} answered ${status}` });
    });
    const timer = setTimeout(() => {
      done({ ok: false, error: `GET ${url} did not answer within ${timeoutMs} ms` });
      req.destroy();
    }, timeoutMs);
    req.on('error', (err) => done({ ok: false, error: `GET ${url}: ${err.message}` }));
    req.end();
  });
}

/** The address to probe an engine bound to `host`: a wildcard bind is reached on loopback. */
export function probeHost(host: string): string {
  if (host === '' || host === '0.0.0.0') return '127.0.0.1';
  if (host === '::' || host === '[::]') return '::1';
  return host;
}
