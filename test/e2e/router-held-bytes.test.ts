// Issue 26's point 6: 1,000 requests of 8 MiB sent at once to a deployment at zero (an autoscaled
// model with no replica, whose requests the waiting room holds). The router, a process of its own
// so that its memory can be read from /proc, holds what fits its byte budget (256 MiB by default:
// 32 bodies), answers the rest 503 with Retry-After before they are uploaded, and its peak RSS
// stays within the budget plus a stated bound.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const DIST = join(__dirname, '../../dist');
const MIB = 1024 * 1024;
const BODY = 8 * MIB;
const BUDGET = 256 * MIB;
/**
 * What the router may use beyond the bodies it holds: node itself and the router's code (about
 * 80 MiB), socket buffers and the garbage a body leaves while it is read (its 64 KiB pieces are
 * copied into one buffer), and 1,000 connections' worth of http state.
 */
const BOUND = 192 * MIB;

// A router with default budgets before one autoscaled deployment at zero; prints its ports.
const ROUTER = `
const { startRouter } = require(${JSON.stringify(join(DIST, 'router/http/server.js'))});
const { StaticRouteSource } = require(${JSON.stringify(join(DIST, 'router/routes/table.js'))});
const { autoscalePolicy } = require(${JSON.stringify(join(DIST, 'common/autoscale.js'))});
const source = new StaticRouteSource([]);
source.setDeployments([{ name: 'cold', servedName: 'cold', model: 'cold', phase: 'Idle', desired: 0,
  autoscale: autoscalePolicy({ min: 0, max: 1, idleToZeroSeconds: 60 }) }]);
startRouter({ source, port: 0, host: '127.0.0.1', admin: { host: '127.0.0.1', port: 0 }, log: () => undefined })
  .then((r) => console.log(JSON.stringify({ port: r.port, admin: r.adminPort })));
`;

let child: ChildProcess | undefined;
afterAll(() => {
  if (child?.pid !== undefined && child.exitCode === null) child.kill('SIGKILL');
});

function kib(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${field}:`));
  return Number(/(\d+)/.exec(line ?? '')?.[1]) * 1024;
}

interface Answer {
  status: number;
  retryAfter: string | undefined;
  code: string | undefined;
  uploaded: boolean;
}

/** One request of `body`; `expectContinue`: the body goes only once the router says 100 Continue. */
function send(port: number, body: Buffer, expectContinue: boolean, agent: http.Agent): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let uploaded = false;
    const req = http.request({
      host: '127.0.0.1',
      port,
      path: '/v1/chat/completions',
      method: 'POST',
      agent,
      headers: { 'content-type': 'application/json', 'content-length': body.length, ...(expectContinue ? { expect: '100-continue' } : {}) },
    });
    const upload = () => {
      uploaded = true;
      req.end(body);
    };
    if (expectContinue) {
      req.on('continue', upload);
      req.flushHeaders();
    } else upload();
    req.on('response', (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => (text += chunk.toString()));
      res.on('end', () => {
        const code = (JSON.parse(text || '{}') as { error?: { code?: string } }).error?.code;
        resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'], code, uploaded });
        req.destroy();
      });
    });
    // A held request's socket is cut when the router is stopped at the end: not an answer.
    req.on('error', (err) => (req.destroyed && uploaded ? undefined : reject(err)));
  });
}

describe('router: a byte budget for held request bodies', () => {
  it('holds 1,000 requests of 8 MiB for a deployment at zero within its budget, answering what does not fit 503 with Retry-After', async () => {
    child = spawn(process.execPath, ['-e', ROUTER], { stdio: ['ignore', 'pipe', 'inherit'] });
    const pid = child.pid as number;
    const ports = await new Promise<{ port: number; admin: number }>((resolve, reject) => {
      child?.stdout?.once('data', (chunk: Buffer) => resolve(JSON.parse(chunk.toString()) as { port: number; admin: number }));
      child?.once('exit', (code) => reject(new Error(`router exited ${code}`)));
    });
    const idle = kib(pid, 'VmRSS');

    const head = Buffer.from('{"model":"cold","max_tokens":2,"messages":[{"role":"user","content":"');
    const tail = Buffer.from('"}]}');
    const body = Buffer.concat([head, Buffer.alloc(BODY - head.length - tail.length, 0x78), tail]);
    expect(body.length).toBe(BODY);
    const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
    const started = performance.now();
    const answers: Answer[] = [];
    const pending = Array.from({ length: 1000 }, () => send(ports.port, body, true, agent).then((a) => answers.push(a)));
    const health = async () =>
      (await (await fetch(`http://127.0.0.1:${ports.admin}/health`)).json()) as {
        queued: Record<string, number>;
        heldBytes: { used: number; limit: number };
      };
    // Bounded: every request is either held or answered within 20 s.
    let seen = await health();
    for (let i = 0; i < 400 && answers.length + (seen.queued.cold ?? 0) < 1000; i++) {
      await new Promise((r) => setTimeout(r, 50));
      seen = await health();
    }
    const held = seen.queued.cold ?? 0;
    // Clients that do not wait for 100 Continue upload their bodies: refused all the same, and
    // what they send is read and dropped, not kept.
    const eager = await Promise.all(Array.from({ length: 16 }, () => send(ports.port, body, false, agent)));
    const peak = kib(pid, 'VmHWM');
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `1,000 × 8 MiB to a deployment at zero: ${held} held (${seen.heldBytes.used / MIB} MiB of ${seen.heldBytes.limit / MIB} MiB), ` +
        `${answers.length} refused, in ${seconds.toFixed(1)} s; router RSS ${Math.round(idle / MIB)} MiB idle, ` +
        `${Math.round(peak / MIB)} MiB peak (budget ${BUDGET / MIB} MiB + bound ${BOUND / MIB} MiB)`,
    );

    expect(held).toBe(BUDGET / BODY);
    expect(answers).toHaveLength(1000 - held);
    expect(seen.heldBytes).toEqual({ used: held * BODY, limit: BUDGET });
    for (const a of [...answers, ...eager]) expect(a).toMatchObject({ status: 503, retryAfter: '2', code: 'router_busy' });
    // Refused before the upload: the router never read a byte of them.
    expect(answers.filter((a) => a.uploaded)).toEqual([]);
    expect(peak).toBeLessThan(BUDGET + BOUND);

    child.kill('SIGKILL');
    await Promise.allSettled(pending);
    agent.destroy();
  }, 60_000);
});
