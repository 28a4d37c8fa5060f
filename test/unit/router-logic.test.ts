// The router's pure logic: who gets a request (power of two choices, cache-aware homes with the
// two-part imbalance guard), when an endpoint is ejected and comes back, what an engine's metrics page
// says about its load, how routes group into models, and the error and key handling.
import { describe, expect, it } from 'vitest';
import { ApiKeys, keysFromEnv } from '../../router/http/auth.js';
import { AffinityTable } from '../../router/policies/affinity-table.js';
import { parseAffinity } from '../../router/policies/affinity-settings.js';
import { hashText } from '../../router/kv/hashing.js';
import { pickLeastLoaded } from '../../router/policies/least-loaded.js';
import type { Candidate } from '../../router/policies/policy.js';
import { EJECT_AFTER_FAILURES, Endpoint } from '../../router/engines/endpoint.js';
import { engineErrorBody, streamErrorEvents } from '../../router/http/errors.js';
import { buildModelRoutes, parseStaticRoutes, routesSignature, type RouteEntry } from '../../router/routes/table.js';
import { parseEngineLoad } from '../../router/engines/scraper.js';
import type { Pool } from 'undici';

class Fake implements Candidate {
  inflight = 0;
  ejected = false;
  constructor(
    readonly url: string,
    /** Work the engine has beyond this router's. */
    public extra = 0,
  ) {}
  score(): number {
    return this.inflight + this.extra;
  }
  load(): number {
    return this.inflight + this.extra;
  }
  available(): boolean {
    return !this.ejected;
  }
}

const fakes = (n: number) => Array.from({ length: n }, (_, i) => new Fake(`http://10.0.0.${i}:8000`));

describe('power of two choices', () => {
  it('of two candidates, always picks the less loaded', () => {
    const [a, b] = fakes(2) as [Fake, Fake];
    a.extra = 5;
    for (let i = 0; i < 50; i++) expect(pickLeastLoaded([a, b], undefined, 0)).toBe(b);
  });

  it('never picks the most loaded of many, and spreads over the idle ones', () => {
    const all = fakes(8);
    (all[3] as Fake).extra = 100;
    const seen = new Set<Candidate>();
    for (let i = 0; i < 500; i++) {
      const picked = pickLeastLoaded(all, undefined, 0) as Fake;
      expect(picked).not.toBe(all[3]);
      seen.add(picked);
    }
    expect(seen.size).toBe(7);
  });

  it('skips endpoints already tried and ejected ones, but uses ejected ones rather than none', () => {
    const [a, b, c] = fakes(3) as [Fake, Fake, Fake];
    b.ejected = true;
    for (let i = 0; i < 20; i++) expect(pickLeastLoaded([a, b, c], [a], 0)).toBe(c);
    c.ejected = true;
    expect(pickLeastLoaded([a, b, c], [a], 0)).not.toBe(a);
    expect(pickLeastLoaded([a, b, c], [a, b, c], 0)).toBeUndefined();
  });
});

describe('cache-aware homes', () => {
  it('sends a new key to the replica home to the fewest keys (ties: the less loaded), and every later request with it there', () => {
    const all = fakes(4);
    for (const [i, f] of all.entries()) f.extra = i === 2 ? 0 : 3;
    const table = new AffinityTable<Fake>();
    const key = hashText('system prompt A');
    expect(table.pick(-1, key, all, 0)).toBe(all[2]);
    expect(table.result).toBe('new');
    (all[2] as Fake).extra = 5;
    for (let i = 0; i < 10; i++) expect(table.pick(-1, key, all, 0)).toBe(all[2]);
    expect(table.result).toBe('home');
    // all[2] is home to one key now: the next new key goes to the least loaded of the others.
    (all[1] as Fake).extra = 1;
    expect(table.pick(-1, hashText('system prompt B'), all, 0)).toBe(all[1]);
  });

  it('spreads keys never seen before evenly over the replicas', () => {
    const all = fakes(4);
    const table = new AffinityTable<Fake>();
    for (let i = 0; i < 400; i++) {
      const chosen = table.pick(-1, hashText(`unique prompt ${i}`), all, 0) as Fake;
      chosen.inflight++;
    }
    for (const f of all) expect(f.inflight).toBe(100);
  });

  it('for engines that report no load, moves a request off its home only when both the absolute and the relative gap are exceeded', () => {
    const [home, other] = fakes(2) as [Fake, Fake];
    const key = hashText('hot prefix');
    const homed = () => {
      const table = new AffinityTable<Fake>({ absGap: 8, relGap: 1.5 });
      [home.inflight, other.inflight] = [0, 0];
      expect(table.pick(-1, key, [home, other], 0)).toBe(home);
      return table;
    };
    // 9 beyond 0 and more than 1.5 x 0: moved, and the prefix is now cached on both.
    let table = homed();
    home.inflight = 9;
    expect(table.pick(-1, key, [home, other], 0)).toBe(other);
    expect(table.result).toBe('diverted');
    expect(table.homesOf(key)).toEqual([home, other]);
    // 9 beyond, but not 1.5 x: stays (a big but proportional load is not an imbalance).
    table = homed();
    [home.inflight, other.inflight] = [29, 20];
    expect(table.pick(-1, key, [home, other], 0)).toBe(home);
    // 1.5 x but only 8 beyond: stays.
    table = homed();
    [home.inflight, other.inflight] = [16, 8];
    expect(table.pick(-1, key, [home, other], 0)).toBe(home);
  });

  it('keeps a session on its replica, starts a new session on its prefix home, and forgets a replica that left', () => {
    const [a, b, c] = fakes(3) as [Fake, Fake, Fake];
    const table = new AffinityTable<Fake>();
    const prefix = hashText('shared system prompt');
    b.extra = 0;
    a.extra = c.extra = 2;
    expect(table.pick(-1, prefix, [a, b, c], 0)).toBe(b);
    b.extra = 4;
    // A new session with that system prompt goes where its prefix is cached, and stays there.
    const alice = hashText('alice');
    expect(table.pick(alice, prefix, [a, b, c], 0)).toBe(b);
    expect(table.pick(alice, hashText('another prompt'), [a, b, c], 0)).toBe(b);
    // b leaves the table: alice and the prefix find new homes.
    const moved = table.pick(alice, prefix, [a, c], 0);
    expect(moved === a || moved === c).toBe(true);
    expect(table.pick(alice, prefix, [a, b, c], 0)).toBe(moved);
  });

  it('does not wait on an ejected home, and returns to it once it is back', () => {
    const all = fakes(2) as [Fake, Fake];
    const table = new AffinityTable<Fake>();
    const key = hashText('k');
    const home = table.pick(key, -1, all, 0) as Fake;
    const other = all[0] === home ? all[1] : all[0];
    home.ejected = true;
    expect(table.pick(key, -1, [home, other], 0)).toBe(other);
    home.ejected = false;
    expect(table.pick(key, -1, [home, other], 0)).toBe(home);
  });

  it('forgets the least recently used keys past its capacity', () => {
    const all = fakes(2);
    const table = new AffinityTable<Fake>(undefined, 3);
    for (let i = 0; i < 5; i++) table.pick(-1, i, all, 0);
    expect(table.size).toBe(3);
  });
});

describe('affinity settings', () => {
  it('is on unless turned off, for all or by name, and names what is wrong', () => {
    expect(parseAffinity(undefined)).toEqual({ enabled: true, byName: new Map() });
    expect(parseAffinity('off')).toEqual({ enabled: false, byName: new Map() });
    expect(parseAffinity('off, chat:on ,code:off')).toEqual({
      enabled: false,
      byName: new Map([
        ['chat', true],
        ['code', false],
      ]),
    });
    expect(() => parseAffinity('chat:sticky')).toThrow(/chat:sticky.*on, off/);
    expect(() => parseAffinity(':on')).toThrow(/names no deployment/);
  });
});

describe('endpoint ejection', () => {
  const endpoint = () => new Endpoint('http://10.0.0.1:8000', {} as Pool);

  it('is ejected after consecutive failures, not after failures separated by successes', () => {
    const e = endpoint();
    for (let i = 0; i < 10; i++) {
      e.recordFailure(0);
      e.recordSuccess();
    }
    expect(e.ejected).toBe(false);
    for (let i = 1; i < EJECT_AFTER_FAILURES; i++) expect(e.recordFailure(0)).toBe(false);
    expect(e.recordFailure(0)).toBe(true);
    expect(e.available(0)).toBe(false);
  });

  it('comes back only when a probe succeeds after the ejection time, on probation, and longer next time', () => {
    const e = endpoint();
    for (let i = 0; i < EJECT_AFTER_FAILURES; i++) e.recordFailure(0);
    e.probeSucceeded(500, undefined);
    expect(e.ejected).toBe(true);
    e.probeSucceeded(1000, undefined);
    expect(e.ejected).toBe(false);
    // On probation: one more failure ejects it again, for twice as long.
    expect(e.recordFailure(1000)).toBe(true);
    e.probeSucceeded(2500, undefined);
    expect(e.ejected).toBe(true);
    e.probeSucceeded(3000, undefined);
    expect(e.ejected).toBe(false);
  });

  it("scores by its own in-flight requests plus the engine's other work and cache pressure", () => {
    const idle = endpoint();
    const busy = endpoint();
    busy.probeSucceeded(0, { running: 6, waiting: 2, kvUsage: 0.9 });
    expect(busy.score()).toBeGreaterThan(idle.score() + 8);
    busy.inflight = 8;
    // Our own eight are the engine's eight: not counted twice, but the queue and cache still weigh.
    busy.probeSucceeded(0, { running: 6, waiting: 2, kvUsage: 0.9 });
    expect(busy.score()).toBeCloseTo(8 + 2 + 4 * 0.9);
  });
});

describe('engine metrics', () => {
  it("reads vLLM's load, summing data-parallel engines and taking the fullest cache", () => {
    const text = [
      '# HELP vllm:num_requests_running Number of requests currently running.',
      '# TYPE vllm:num_requests_running gauge',
      'vllm:num_requests_running{engine="0",model_name="demo"} 3.0',
      'vllm:num_requests_running{engine="1",model_name="demo"} 2.0',
      'vllm:num_requests_waiting{engine="0",model_name="demo"} 4.0',
      'vllm:num_requests_waiting_total{model_name="demo"} 99',
      'vllm:kv_cache_usage_perc{engine="0",model_name="demo"} 0.25',
      'vllm:kv_cache_usage_perc{engine="1",model_name="demo"} 0.5',
      'vllm:request_success_total{model_name="demo",finished_reason="stop"} 12',
    ].join('\n');
    expect(parseEngineLoad(text)).toEqual({ running: 5, waiting: 4, kvUsage: 0.5, requests: 12 });
  });

  it("reads older vLLM's gpu_cache_usage_perc and SGLang's names, and nothing from an unrelated page", () => {
    expect(parseEngineLoad('vllm:gpu_cache_usage_perc{model_name="m"} 0.7\nvllm:num_requests_running{model_name="m"} 1')).toEqual({
      running: 1,
      waiting: 0,
      kvUsage: 0.7,
    });
    const sglang =
      'sglang:num_running_reqs{model_name="m",tp_rank="0"} 7.0\nsglang:num_queue_reqs{model_name="m"} 2.0\nsglang:token_usage{model_name="m"} 0.31 1712345678000\n';
    expect(parseEngineLoad(sglang)).toEqual({ running: 7, waiting: 2, kvUsage: 0.31 });
    expect(parseEngineLoad('process_cpu_seconds_total 12\n')).toBeUndefined();
  });
});

describe('route table', () => {
  const entry = (over: Partial<RouteEntry>): RouteEntry => ({
    deployment: 'd',
    servedName: 'm',
    endpoint: 'http://a:1',
    phase: 'Ready',
    replicaId: 'replica/d/1',
    ...over,
  });

  it('groups routable endpoints by served name and keeps models with none ready (503, not 404)', () => {
    const routes = buildModelRoutes([
      entry({ endpoint: 'http://b:1', replicaId: 'replica/d/2' }),
      entry({}),
      entry({ endpoint: 'http://c:1', phase: 'Draining', replicaId: 'replica/d/3' }),
      entry({ endpoint: 'http://u:1', phase: 'Unknown', replicaId: 'replica/d/4' }),
      entry({ deployment: 'other', servedName: 'o', endpoint: '', phase: 'Loading' }),
      entry({ endpoint: 'http://::1:8000', replicaId: 'replica/d/5' }),
      entry({ endpoint: 'http://e:1/v1', replicaId: 'replica/d/6' }),
    ]);
    expect(routes.get('m')?.endpoints).toEqual(['http://a:1', 'http://b:1', 'http://u:1']);
    expect(routes.get('d')).toBe(routes.get('m'));
    expect(routes.get('o')?.endpoints).toEqual([]);
  });

  it('has the same signature for the same table in another order, another for a phase change', () => {
    const a = [entry({}), entry({ endpoint: 'http://b:1' })];
    expect(routesSignature(a)).toBe(routesSignature([...a].reverse()));
    expect(routesSignature([entry({}), entry({ endpoint: 'http://b:1', phase: 'Draining' })])).not.toBe(routesSignature(a));
  });

  it('parses --static-routes', () => {
    expect(parseStaticRoutes('demo=http://127.0.0.1:18000, demo=http://127.0.0.1:18001/')).toEqual([
      { servedName: 'demo', endpoint: 'http://127.0.0.1:18000' },
      { servedName: 'demo', endpoint: 'http://127.0.0.1:18001' },
    ]);
    expect(() => parseStaticRoutes('demo')).toThrow(/NAME=http/);
  });
});

describe('errors and keys', () => {
  it("turns both of vLLM's error shapes and plain text into OpenAI's", () => {
    const flat = JSON.parse(
      engineErrorBody(400, '{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}'),
    );
    expect(flat).toEqual({ error: { message: 'too long', type: 'BadRequestError', param: null, code: 400 } });
    const nested = JSON.parse(
      engineErrorBody(404, '{"error":{"message":"no such model","type":"NotFoundError","param":"model","code":404}}'),
    );
    expect(nested).toEqual({ error: { message: 'no such model', type: 'NotFoundError', param: 'model', code: 404 } });
    const text = JSON.parse(engineErrorBody(500, 'Internal Server Error'));
    expect(text).toEqual({ error: { message: 'Internal Server Error', type: 'server_error', param: null, code: 500 } });
    expect(streamErrorEvents('gone')).toMatch(/^data: \{"error":\{"message":"gone".*\n\ndata: \[DONE\]\n\n$/);
  });

  it('accepts only a configured key, as a Bearer token', () => {
    const keys = new ApiKeys(['alpha', 'beta-longer-key']);
    expect(keys.check('Bearer alpha')?.index).toBe(0);
    expect(keys.check('bearer beta-longer-key')?.index).toBe(1);
    expect(keys.check('Bearer alph')).toBeUndefined();
    expect(keys.check('alpha')).toBeUndefined();
    expect(keys.check(undefined)).toBeUndefined();
    expect(keysFromEnv({ LLMGW_API_KEYS: ' a, b ,,' }).map((k) => k.key)).toEqual(['a', 'b']);
    // One a line, a JSON entry scopes a key from the environment as in a keys file.
    const scoped = keysFromEnv({ LLMGW_API_KEYS: 'a,b\n{"key": "sk-env-scoped", "id": "ci", "models": ["demo"]}\n# c' });
    expect(scoped.map((k) => k.key)).toEqual(['a', 'b', 'sk-env-scoped']);
    expect(scoped[2]).toMatchObject({ id: 'ci', where: 'LLMGW_API_KEYS line 2', scope: { models: new Set(['demo']) } });
    const bad = () => keysFromEnv({ LLMGW_API_KEYS: '{"key": "sk-env-secret", "model": ["demo"]}' });
    expect(bad).toThrow(/^LLMGW_API_KEYS line 1: unknown field/);
    expect(bad).not.toThrow(/sk-env-secret/);
  });
});
