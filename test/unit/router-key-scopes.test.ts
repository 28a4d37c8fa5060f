// API keys scoped to models and adapters, at a real router over real fake engines: the keys file
// (old lines and JSON entries side by side, each mistake named by line without the key), a key
// refused a model or adapter outside its scope in OpenAI's 404 before anything is held or woken,
// and /v1/models listing only what the key may use.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { autoscalePolicy } from '../../common/autoscale.js';
import { ApiKeys, loadApiKeys, parseKeyEntry } from '../../router/http/auth.js';
import { engine, router, url, useRouterHarness } from '../helpers/router-harness.js';

useRouterHarness();
const dir = mkdtempSync(join(tmpdir(), 'llmgw-key-scopes-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function keysFile(text: string): string {
  const file = join(dir, `keys-${Math.random().toString(36).slice(2)}`);
  writeFileSync(file, text);
  return file;
}

const SECRET = 'sk-secret-scoped-0123';

describe('the keys file', () => {
  it('reads old lines and JSON entries side by side; a key with no scope may use everything', () => {
    const file = keysFile(
      [
        '# old lines still work',
        'sk-plain rps=2',
        `{"key": "${SECRET}", "id": "team-a", "models": ["alpha"], "adapters": ["sql"], "concurrent": 3}`,
        '{"key": "sk-json-unscoped", "rps": 1.5}',
        '{"key": "sk-every-model", "models": ["*"]}',
      ].join('\n'),
    );
    const keys = loadApiKeys({ file, env: { LLMGW_API_KEYS: 'sk-env' } }) as ApiKeys;
    const [plain, scoped, unscoped, every, env] = keys.keys;
    expect(plain).toMatchObject({ id: plain?.label, scope: undefined, limits: { rps: 2 } });
    expect(scoped).toMatchObject({ id: 'team-a', limits: { concurrent: 3 } });
    expect(scoped?.scope).toEqual({ models: new Set(['alpha']), adapters: new Set(['sql']) });
    expect(unscoped).toMatchObject({ scope: undefined, limits: { rps: 1.5 } });
    // Once a list is given, the other kind left out is none of it, not all.
    expect(every?.scope).toEqual({ models: 'all', adapters: new Set() });
    expect(env?.scope).toBeUndefined();
    expect(keys.check(`Bearer ${SECRET}`)?.id).toBe('team-a');
  });

  it('refuses a malformed entry at start, naming its line and never the key', () => {
    const cases: Array<[string, RegExp]> = [
      [`{"key": "${SECRET}", "models": ["alpha"]`, /:2: not a JSON object/],
      [
        `{"key": "${SECRET}", "model": ["alpha"]}`,
        /:2: unknown field \(the fields are key, id, rps, concurrent, models, adapters, tenant, weight, priority\)/,
      ],
      [`{"${SECRET}": {"models": ["alpha"]}}`, /:2: .*unknown field/],
      [`{"key": "${SECRET}", "models": "alpha"}`, /:2: models: models must be a list of names/],
      [`{"key": "${SECRET}", "models": [""]}`, /:2: models\.0: a name must not be empty/],
      [`{"key": "${SECRET}", "models": [], "adapters": []}`, /:2: models and adapters name nothing/],
      [`{"key": "${SECRET}", "id": "${SECRET}"}`, /:2: id must not be the key/],
      [`{"key": "${SECRET}", "rps": "fast"}`, /:2: rps: rps must be a number/],
      // An old line with a second word that is no option (a second key on the line) is not quoted either.
      [`sk-plain ${SECRET}`, /:2: unknown option \(word 2 of the line; options are rps=…, concurrent=…, tenant=…, weight=…, priority=…\)/],
    ];
    for (const [line, error] of cases) {
      const file = keysFile(`# keys\n${line}\n`);
      let message = '';
      try {
        loadApiKeys({ file, env: {} });
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message, line).toMatch(error);
      expect(message, line).not.toContain(SECRET);
    }
    // The first entry of a key is the one that counts: a scoped key listed twice is refused.
    const twice = keysFile(`${SECRET}\n{"key": "${SECRET}", "models": ["alpha"]}\n`);
    expect(() => loadApiKeys({ file: twice, env: {} })).toThrow(/:2: the key of .*:1 again; a scoped key is listed once/);
    expect(() => parseKeyEntry(`{"key": "${SECRET}", "models": ["alpha"]}`)).not.toThrow();
  });
});

const SCOPED = 'sk-scoped-to-alpha';
const ADAPTER_KEY = 'sk-scoped-to-sql';
const OPEN = 'sk-unscoped';

async function scopedRouter() {
  const [alpha, beta] = [
    await engine({ model: 'alpha', lora: { maxLoras: 2, maxLoraRank: 16, loadTimeS: 0.05 } }),
    await engine({ model: 'beta' }),
  ];
  const adapterDir = join(dir, 'sql');
  mkdirSync(adapterDir, { recursive: true });
  writeFileSync(join(adapterDir, 'adapter_config.json'), JSON.stringify({ r: 8 }));
  const keys = loadApiKeys({
    file: keysFile(
      [`{"key": "${SCOPED}", "id": "team-a", "models": ["alpha-prod"]}`, `{"key": "${ADAPTER_KEY}", "adapters": ["sql"]}`, OPEN].join('\n'),
    ),
    env: {},
  });
  const held: string[] = [];
  const running = await router(
    [
      { servedName: 'alpha', deployment: 'alpha-prod', endpoint: url(alpha) },
      { servedName: 'beta', endpoint: url(beta) },
    ],
    {
      apiKeys: keys,
      adapters: () =>
        new Map([
          [
            'alpha',
            [
              { name: 'sql', source: adapterDir },
              { name: 'other', source: adapterDir },
            ],
          ],
        ]),
      onHold: (m) => held.push(m),
    },
  );
  // An autoscaled deployment at zero: any request it may take is held and wakes it.
  running.source.setDeployments([
    { name: 'gamma', servedName: 'gamma', model: 'gamma', phase: 'Idle', desired: 0, autoscale: autoscalePolicy({ min: 0, max: 1 }) },
  ]);
  await new Promise((r) => setTimeout(r, 250));
  return { ...running, held };
}

const chat = (base: string, key: string, model: string) =>
  fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
  });

const models = async (base: string, key: string) =>
  (
    (await (await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: Array<{ id: string }> }
  ).data
    .map((m) => m.id)
    .sort();

describe('a scoped key at the router', () => {
  it('is served its model under either name, and refused every other one in the same 404, naming its id and scope', async () => {
    const { base, admin, held } = await scopedRouter();
    expect((await chat(base, SCOPED, 'alpha')).status).toBe(200);
    expect((await chat(base, SCOPED, 'alpha-prod')).status).toBe(200);
    const refusals = await Promise.all(['beta', 'gamma', 'no-such-model', 'sql'].map((m) => chat(base, SCOPED, m)));
    const bodies = await Promise.all(
      refusals.map(async (r) => ({ status: r.status, body: (await r.json()) as { error: Record<string, unknown> } })),
    );
    for (const [i, model] of ['beta', 'gamma', 'no-such-model', 'sql'].entries()) {
      expect(bodies[i]?.status).toBe(404);
      expect(bodies[i]?.body.error).toEqual({
        message: `The model \`${model}\` does not exist or you do not have access to it. API key team-a may use models alpha-prod; no adapter.`,
        type: 'invalid_request_error',
        param: 'model',
        code: 'model_not_found',
      });
    }
    // gamma is at zero: the refused request was never held and woke nothing.
    expect(held).toEqual([]);
    const metrics = await (await fetch(`${admin}/metrics`)).text();
    expect(metrics).toMatch(/llmgw_router_key_out_of_scope_total\{key="sha256:[0-9a-f]{12}"\} 4/);
    expect(metrics).not.toContain(SCOPED);
    expect(metrics).not.toMatch(/llmgw_router_queued_total\{model="gamma"/);
    // The same request with a key that may use gamma is held, and wakes it.
    const open = chat(base, OPEN, 'gamma');
    await new Promise((r) => setTimeout(r, 200));
    expect(held).toEqual(['gamma']);
    void open.catch(() => undefined);
  });

  it('lists in /v1/models, and describes, only what the key may use; adapters only by their own name', async () => {
    const { base } = await scopedRouter();
    expect(await models(base, OPEN)).toEqual(['alpha', 'beta', 'gamma', 'other', 'sql']);
    expect(await models(base, SCOPED)).toEqual(['alpha']);
    expect(await models(base, ADAPTER_KEY)).toEqual(['sql']);
    const one = (key: string, name: string) => fetch(`${base}/v1/models/${name}`, { headers: { authorization: `Bearer ${key}` } });
    expect((await one(SCOPED, 'alpha-prod')).status).toBe(200);
    expect((await one(SCOPED, 'beta')).status).toBe(404);
    expect((await one(ADAPTER_KEY, 'sql')).status).toBe(200);
    expect((await one(ADAPTER_KEY, 'alpha')).status).toBe(404);
    // An adapter key is served its adapter (loaded on its base), and refused the base and other adapters.
    expect((await chat(base, ADAPTER_KEY, 'sql')).status).toBe(200);
    expect((await chat(base, ADAPTER_KEY, 'other')).status).toBe(404);
    expect((await chat(base, ADAPTER_KEY, 'alpha')).status).toBe(404);
  });
});
