// The router's pure logic: who gets a request (power of two choices, consistent hashing with
// bounded load), when an endpoint is ejected and comes back, what an engine's metrics page
// says about its load, how routes group into models, and the error and key handling.
import { describe, expect, it } from 'vitest';
import { ApiKeys, keysFromEnv } from '../../router/auth.js';
import { BOUNDED_LOAD_FACTOR, HashRing, hashText, parseAffinity, pickLeastLoaded, type Candidate } from '../../router/balancer.js';
import { EJECT_AFTER_FAILURES, Endpoint } from '../../router/endpoint.js';
import { engineErrorBody, streamErrorEvents } from '../../router/errors.js';
import { buildModelRoutes, parseStaticRoutes, routesSignature, type RouteEntry } from '../../router/routes.js';
import { parseEngineLoad } from '../../router/scraper.js';
import type { Pool } from 'undici';

class Fake implements Candidate {
  inflight = 0;
  ejected = false;
  constructor(
    readonly url: string,
    public load = 0,
  ) {}
  score(): number {
    return this.inflight + this.load;
  }
  available(): boolean {
    return !this.ejected;
  }
}

const fakes = (n: number) => Array.from({ length: n }, (_, i) => new Fake(`http://10.0.0.${i}:8000`));

describe('power of two choices', () => {
  it('of two candidates, always picks the less loaded', () => {
    const [a, b] = fakes(2) as [Fake, Fake];
    a.load = 5;
    for (let i = 0; i < 50; i++) expect(pickLeastLoaded([a, b], undefined, 0)).toBe(b);
  });

  it('never picks the most loaded of many, and spreads over the idle ones', () => {
    const all = fakes(8);
    (all[3] as Fake).load = 100;
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

describe('consistent hashing with bounded load', () => {
  it('sends a key to the same endpoint every time, and moves few keys when an endpoint joins', () => {
    const members = fakes(4);
    const ring = new HashRing(members);
    const keys = Array.from({ length: 1000 }, (_, i) => hashText(`session-${i}`));
    const owners = keys.map((k) => ring.pick(k, undefined, 0));
    expect(keys.map((k) => ring.pick(k, undefined, 0))).toEqual(owners);
    const counts = new Map<Candidate | undefined, number>();
    for (const o of owners) counts.set(o, (counts.get(o) ?? 0) + 1);
    for (const n of counts.values()) expect(n).toBeGreaterThan(120);

    const grown = new HashRing([...members, new Fake('http://10.0.0.9:8000')]);
    const moved = keys.filter((k, i) => grown.pick(k, undefined, 0) !== owners[i]).length;
    // About a fifth of the keys should move to the new endpoint, and no others.
    expect(moved).toBeGreaterThan(100);
    expect(moved).toBeLessThan(330);
  });

  it('moves a key on when its endpoint is over the load bound, or ejected', () => {
    const members = fakes(3);
    const ring = new HashRing(members);
    const key = hashText('hot-session');
    const home = ring.pick(key, undefined, 0) as Fake;
    home.inflight = 10;
    const bound = Math.ceil((BOUNDED_LOAD_FACTOR * 11) / 3);
    expect(home.inflight + 1).toBeGreaterThan(bound);
    const moved = ring.pick(key, undefined, 0);
    expect(moved).not.toBe(home);
    home.inflight = 0;
    home.ejected = true;
    expect(ring.pick(key, undefined, 0)).not.toBe(home);
    home.ejected = false;
    expect(ring.pick(key, undefined, 0)).toBe(home);
  });
});

describe('affinity settings and prompt prefixes', () => {
  it('parses deployment:mode pairs and names what is wrong', () => {
    expect([...parseAffinity('chat:session, code:prefix')]).toEqual([
      ['chat', 'session'],
      ['code', 'prefix'],
    ]);
    expect(parseAffinity(undefined).size).toBe(0);
    expect(() => parseAffinity('chat:sticky')).toThrow(/chat:sticky.*session or prefix/);
    expect(() => parseAffinity('chat')).toThrow(/DEPLOYMENT:session/);
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
    expect(parseEngineLoad(text)).toEqual({ running: 5, waiting: 4, kvUsage: 0.5 });
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
    expect(keysFromEnv({ LLMGW_API_KEYS: ' a, b ,,' })).toEqual(['a', 'b']);
  });
});
