// The router balancing over real fake engines: concurrent requests spread, sessions and shared
// prompt prefixes kept on one engine (unless affinity is off), Unknown replicas still served,
// draining ones sent nothing new.
import { describe, expect, it } from 'vitest';
import { parseAffinity } from '../../router/policies/affinity-settings.js';
import { chat, engine, engineMetric, engineOf, post, router, url, useRouterHarness } from '../helpers/router-harness.js';

useRouterHarness();

describe('router: balancing', () => {
  it('spreads concurrent requests over both engines', async () => {
    const a = await engine({ tokensPerSecond: 100 });
    const b = await engine({ tokensPerSecond: 100 });
    const { openai } = await router([
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b) },
    ]);
    const answers = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: `q${i}` }], max_tokens: 10 }),
      ),
    );
    const counts = new Map<string, number>();
    for (const answer of answers) counts.set(engineOf(answer.id), (counts.get(engineOf(answer.id)) ?? 0) + 1);
    expect(counts.size).toBe(2);
    for (const n of counts.values()) expect(n).toBeGreaterThanOrEqual(8);
  });

  it("keeps a session (X-Session-ID, else the body's user) on one engine by default, while sessions spread over both", async () => {
    const a = await engine();
    const b = await engine();
    const { openai } = await router([
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b) },
    ]);
    const ask = async (session: string, how: 'header' | 'user' = 'header') =>
      engineOf(
        (
          await openai.chat.completions.create(
            {
              model: 'demo',
              messages: [{ role: 'user', content: `turn ${Math.random()}` }],
              max_tokens: 2,
              ...(how === 'user' ? { user: session } : {}),
            },
            { headers: how === 'header' ? { 'x-session-id': session } : {} },
          )
        ).id,
      );
    const first = await ask('alice');
    for (let i = 0; i < 10; i++) expect(await ask('alice')).toBe(first);
    const bob = await ask('bob', 'user');
    for (let i = 0; i < 10; i++) expect(await ask('bob', 'user')).toBe(bob);
    const owners = new Set<string>();
    for (let i = 0; i < 20; i++) owners.add(await ask(`session-${i}`));
    expect(owners.size).toBe(2);
  });

  it('keeps sending to a replica whose agent is unreachable (Unknown) while its engine answers', async () => {
    const e = await engine();
    const { base } = await router([{ servedName: 'demo', endpoint: url(e), phase: 'Unknown' }]);
    expect((await post(base, '/v1/chat/completions', chat())).status).toBe(200);
  });

  it('keeps prompts that share their beginning on one engine by default, and spreads them with affinity off', async () => {
    const a = await engine();
    const b = await engine();
    const routes = [
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b) },
    ];
    const { openai } = await router(routes);
    const off = (await router(routes, { affinity: parseAffinity('demo:off') })).openai;
    const ask = async (system: string, question: string, client = openai) =>
      engineOf(
        (
          await client.chat.completions.create({
            model: 'demo',
            messages: [
              { role: 'system', content: system },
              { role: 'user', content: question },
            ],
            max_tokens: 2,
          })
        ).id,
      );
    const system = `You are agent ${'x'.repeat(1200)}`;
    const first = await ask(system, 'first question');
    for (let i = 0; i < 8; i++) expect(await ask(system, `question ${i}`)).toBe(first);
    const owners = new Set<string>();
    for (let i = 0; i < 20; i++) owners.add(await ask(`You are agent number ${i}`, 'hello'));
    expect(owners.size).toBe(2);
    const spread = new Set<string>();
    for (let i = 0; i < 20; i++) spread.add(await ask(system, `question ${i}`, off));
    expect(spread.size).toBe(2);
  });

  it('sends no new request to a replica once it leaves the table (draining)', async () => {
    const a = await engine();
    const b = await engine();
    const {
      openai,
      source,
      router: r,
    } = await router([
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b) },
    ]);
    source.set([
      { servedName: 'demo', endpoint: url(a) },
      { servedName: 'demo', endpoint: url(b), phase: 'Draining' },
    ]);
    await r.refreshRoutes();
    const before = await engineMetric(b, 'vllm:request_success_total');
    for (let i = 0; i < 10; i++)
      await openai.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: `q${i}` }], max_tokens: 2 });
    expect(await engineMetric(b, 'vllm:request_success_total')).toBe(before);
  });
});
