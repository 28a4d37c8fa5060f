// The router's backpressure: the engine's response is paused while the client's socket is full and
// resumed on drain.
import { EventEmitter } from 'node:events';
import type { Pool } from 'undici';
import { describe, expect, it } from 'vitest';
import { Endpoint } from '../../router/engines/endpoint.js';
import { RouterMetrics } from '../../router/metrics.js';
import { ModelPool } from '../../router/engines/model-pool.js';
import { leastLoaded } from '../../router/policies/least-loaded.js';
import { ANONYMOUS_CLASS } from '../../router/flow/priority.js';
import { Exchange } from '../../router/engines/exchange.js';
import type { ExchangeResponse } from '../../router/engines/routed-request.js';

describe('router: backpressure', () => {
  /** Just enough of a ServerResponse: a socket that is full until drained. */
  class SlowClient extends EventEmitter {
    full = false;
    written = 0;
    headersSent = false;
    destroyed = false;
    exchange: Exchange | undefined = undefined;
    writeHead(): this {
      return this;
    }
    flushHeaders(): void {
      this.headersSent = true;
    }
    write(chunk: Buffer): boolean {
      this.headersSent = true;
      this.written += chunk.length;
      return !this.full;
    }
    end(): void {}
  }

  it("pauses the engine's response while the client's socket is full, and resumes it on drain", () => {
    const dispatched: unknown[] = [];
    const pool = { dispatch: (_opts: unknown, handler: unknown) => dispatched.push(handler) } as unknown as Pool;
    const metrics = new RouterMetrics(() => []);
    const model = new ModelPool('demo', [new Endpoint('http://engine:1', pool)], leastLoaded(), metrics.forModel('demo'));
    const client = new SlowClient();
    const exchange = new Exchange(
      { metrics, maxAttempts: 3, lookup: () => model, debugHeaders: false },
      client as unknown as ExchangeResponse,
      model,
      {
        path: '/v1/chat/completions',
        body: Buffer.from('{}'),
        session: -1,
        prefix: -1,
        startedAt: 0,
        flow: ANONYMOUS_CLASS,
        deadline: undefined,
        eligible: undefined,
        predictedTtftMs: -1,
      },
    );
    exchange.start();
    expect(dispatched).toEqual([exchange]);

    // undici's own handler hooks: onData answering false pauses the socket until resume().
    let paused = false;
    const resume = () => (paused = false);
    const deliver = (text: string) => {
      if (!exchange.onData(Buffer.from(text))) paused = true;
    };
    exchange.onConnect(() => undefined);
    exchange.onHeaders(200, [Buffer.from('Content-Type'), Buffer.from('text/event-stream')], resume);
    deliver('data: {"a":1}\n\n');
    expect(paused).toBe(false);
    client.full = true;
    deliver('data: {"a":2}\n\n');
    expect(paused).toBe(true);
    client.full = false;
    client.emit('drain');
    expect(paused).toBe(false);
    expect(client.written).toBe(30);
  });
});
