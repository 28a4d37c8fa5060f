// The router's budget for request bodies and priorities (issue 39): when held sheddable bodies
// have spent the budget, a critical request is not refused 503 router_busy; the newest sheddable
// request held gives its bytes up (429, naming its priority) and the critical one is served. A
// request with nothing lower held to give way is refused as before.
import { describe, expect, it } from 'vitest';
import { ApiKeys } from '../../router/http/auth.js';
import { PRIORITIES } from '../../router/flow/priority.js';
import { engine, router, url, useRouterHarness } from '../helpers/router-harness.js';
import { waitFor } from '../helpers/poll.js';
import { ask, learnCapacity, running } from '../helpers/flow-rig.js';

useRouterHarness();

const CRIT = 'sk-crit-0123456789';
const SHED = 'sk-shed-0123456789';
const HOLD = 'sk-hold-0123456789';
/** About 260 bytes a body: four fit the budget below, not five. */
const content = 'x'.repeat(200);

describe('the held-bytes budget', () => {
  it('is made room in for a critical request by shedding held sheddable ones', async () => {
    const e = await engine({ maxConcurrency: 1, tokensPerSecond: 20 });
    const r = await router([{ servedName: 'demo', endpoint: url(e) }], {
      apiKeys: new ApiKeys([
        { key: CRIT, tenant: 'ops', priority: PRIORITIES.critical },
        { key: SHED, tenant: 'batch', priority: PRIORITIES.sheddable },
        { key: HOLD, tenant: 'hold' },
      ]),
      scrapeIntervalMs: 50,
      heldBytes: 1000,
      queue: { saturatedWaiting: 0 },
    });
    await learnCapacity(r.base, e, 1, HOLD);
    const holder = ask(r.base, { key: HOLD, maxTokens: 20, content });
    await running(r.router, 1);
    const held = [ask(r.base, { key: SHED, content })];
    await waitFor(() => r.router.health().queued.demo === 1);
    held.push(ask(r.base, { key: SHED, content }));
    await waitFor(() => r.router.health().queued.demo === 2);

    // Nothing lower than sheddable is held: a third one finds no bytes.
    const busy = await ask(r.base, { key: SHED, content });
    expect(busy.status).toBe(503);
    expect(((await busy.json()) as { error: { code: string } }).error.code).toBe('router_busy');

    // A critical one takes the newest sheddable one's bytes; that one is told why.
    const critical = ask(r.base, { key: CRIT, content });
    const shed = await (held[1] as Promise<Response>);
    expect(shed.status).toBe(429);
    expect(((await shed.json()) as { error: { message: string } }).error.message).toContain('priority (sheddable) is the lowest');
    for (const res of await Promise.all([holder, critical, held[0] as Promise<Response>])) {
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
  });
});
