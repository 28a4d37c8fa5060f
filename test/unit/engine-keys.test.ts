// Engine keys per replica run (issue 37): the key an engine requires is derived from the fleet's
// for its run chain, so one replica's engine, which reads its own key, opens no other. Shown with
// the derivation itself, a ticket renewed into a rebuilt replica's chain (its engines keep the key
// they started with), and a real router over real fake engines keyed as the agent keys them.
import { demoTicket } from '../helpers/tickets.js';
import { asActivityOf, fakeReplicaClient } from '../helpers/replica-fakes.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renewTickets } from '../../activities/placement-tickets.js';
import { trueRoute } from '../../activities/route-signing.js';
import { ensureCatalogKeyFile, readCatalogKeys } from '../../common/catalog-key.js';
import { engineKeyFor, keyChainOf } from '../../common/engine-keys.js';
import { signPlacementTicket, verifyPlacementTicket, type PlacementTicket } from '../../common/placement-ticket.js';
import { signRoute, verifyRoute } from '../../common/route-signature.js';
import { engine, engineMetric, post, router, url, useRouterHarness } from '../helpers/router-harness.js';

useRouterHarness();

const FLEET = 'fleet-engine-key-0123456789abcdef';

describe('deriving an engine key', () => {
  it('is stable for a chain, differs per chain and from the fleet key, and is a bearer token', () => {
    const a = engineKeyFor(FLEET, 'chain-a');
    expect(engineKeyFor(FLEET, 'chain-a')).toBe(a);
    expect(engineKeyFor(FLEET, 'chain-b')).not.toBe(a);
    expect(engineKeyFor(`${FLEET}x`, 'chain-a')).not.toBe(a);
    expect(a).not.toBe(FLEET);
    expect(a).not.toContain(FLEET);
    // RFC 6750's b64token: nothing a header, an environment variable or SGLang's YAML must escape.
    expect(a).toMatch(/^[A-Za-z0-9\-._~+/]+=*$/);
    // A start or route naming no chain (placed before tickets): the fleet key, as those engines have.
    expect(engineKeyFor(FLEET, undefined)).toBe(FLEET);
    expect(engineKeyFor(FLEET, '')).toBe(FLEET);
    expect(keyChainOf({ chain: 'b', keyChain: 'a' })).toBe('a');
    expect(keyChainOf({ chain: 'b' })).toBe('b');
    expect(keyChainOf({ chain: '' })).toBeUndefined();
  });
});

function ticket(chain: string): PlacementTicket {
  // Unsigned revision: whether a revision is live is revision-signature.test's, not this file's.
  return demoTicket({ placedByRun: chain, chain });
}

/** Attestation is routes-attested-live's: these nodes have no enrolled key, as a 0.2.0 fleet's. */
const UNATTESTED = { trustUnenrolled: true };

describe('a replica rebuilt around running engines', () => {
  it('renews its tickets into its own chain, naming the chain whose key the engines hold, and its route says so', async () => {
    const keyFile = join(mkdtempSync(join(tmpdir(), 'llmgw-engine-keys-')), 'catalog.key');
    ensureCatalogKeyFile(keyFile);
    const keyring = readCatalogKeys(keyFile);
    const shard = { shardId: 'demo.1.r0.a1', nodeId: 'gpu-1', ticket: signPlacementTicket(ticket('chain-a'), keyring) };
    type Shards = Parameters<typeof renewTickets>[1];

    // The rebuilt replica (chain b) adopts chain a's engine: its ticket is chain b's, its key chain a's.
    const [adopted] = await asActivityOf('chain-b', () =>
      renewTickets(fakeReplicaClient('chain-b'), [shard] as unknown as Shards, keyFile),
    );
    const renewed = verifyPlacementTicket(adopted!.ticket!, keyring.all);
    expect(renewed).toMatchObject({ ok: true, ticket: { chain: 'chain-b', keyChain: 'chain-a' } });
    // Renewed again by the same chain (a restart of that engine): still chain a's key.
    const [again] = await asActivityOf('chain-b', () =>
      renewTickets(fakeReplicaClient('chain-b'), [adopted!] as unknown as Shards, keyFile),
    );
    expect(verifyPlacementTicket(again!.ticket!, keyring.all)).toMatchObject({
      ok: true,
      ticket: { chain: 'chain-b', keyChain: 'chain-a' },
    });
    // A ticket renewed by its own chain names no key chain, and signs as before the field existed.
    const [own] = await asActivityOf('chain-a', () => renewTickets(fakeReplicaClient('chain-a'), [shard] as unknown as Shards, keyFile));
    const plain = verifyPlacementTicket(own!.ticket!, keyring.all);
    expect(plain.ok && plain.ticket.keyChain).toBe(undefined);

    // Its route names its live chain and, signed, the chain whose key the engine holds.
    const entry = { replicaId: 'replica/demo/1', deployment: 'demo', servedName: 'demo', endpoint: '', phase: 'Ready' as const };
    const signed = await trueRoute(fakeReplicaClient('chain-b', [{ ...adopted, rank: 0 }]), entry, keyFile, UNATTESTED);
    expect(signed).toMatchObject({ route: { chain: 'chain-b', keyChain: 'chain-a', endpoint: 'http://198.18.0.7:8000' } });
    expect('route' in signed && verifyRoute(signed.route, keyring.all).ok).toBe(true);
    // A replica placed before tickets (0.2.0): its engine holds the fleet key, so its route names no chain.
    const legacy = await trueRoute(
      fakeReplicaClient('chain-b', [{ shardId: 'demo.1.r0.a1', nodeId: 'gpu-1', rank: 0 }]),
      entry,
      keyFile,
      UNATTESTED,
    );
    expect(legacy).toMatchObject({ route: { servedName: 'demo', signature: expect.any(String) } });
    expect('route' in legacy && keyChainOf(legacy.route)).toBe(undefined);

    // The route's key chain is signed: a route moved to another chain's key does not verify.
    const route = {
      replicaId: 'replica/demo/1',
      deployment: 'demo',
      servedName: 'demo',
      endpoint: 'http://198.18.0.7:8000',
      chain: 'chain-b',
      keyChain: 'chain-a',
    };
    const signature = signRoute(route, keyring);
    expect(verifyRoute({ ...route, signature }, keyring.all).ok).toBe(true);
    expect(verifyRoute({ ...route, keyChain: 'chain-c', signature }, keyring.all).ok).toBe(false);
    expect(verifyRoute({ ...route, keyChain: undefined, signature }, keyring.all).ok).toBe(false);
  });
});

describe('a router in front of engines keyed per replica run', () => {
  it("sends each engine its own run's key, the fleet key only where a route names no chain; an engine refuses another run's key and the fleet key", async () => {
    const a = await engine({ apiKey: engineKeyFor(FLEET, 'run-a') });
    const b = await engine({ apiKey: engineKeyFor(FLEET, 'run-b') });
    const legacy = await engine({ model: 'old', apiKey: FLEET });
    const body = JSON.stringify({ model: 'demo', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

    // Straight to engine A (what another tenant's engine could try): only run A's key opens it.
    expect((await post(url(a), '/v1/chat/completions', body, bearer(engineKeyFor(FLEET, 'run-b')))).status).toBe(401);
    expect((await post(url(a), '/v1/chat/completions', body, bearer(FLEET))).status).toBe(401);
    expect((await post(url(a), '/v1/chat/completions', body, bearer(engineKeyFor(FLEET, 'run-a')))).status).toBe(200);

    const { base, source } = await router(
      [
        { servedName: 'demo', endpoint: url(a), chain: 'run-a' },
        { servedName: 'demo', endpoint: url(b), chain: 'run-b' },
        { servedName: 'old', endpoint: url(legacy) },
      ],
      { engineKey: FLEET },
    );
    for (let i = 0; i < 8; i++) {
      expect((await post(base, '/v1/chat/completions', body)).status).toBe(200);
      const old = await post(base, '/v1/chat/completions', body.replace('"demo"', '"old"'));
      expect(old.status).toBe(200);
    }
    const answered = async () =>
      (await engineMetric(a, 'vllm:request_success_total')) + (await engineMetric(b, 'vllm:request_success_total'));
    expect(await answered()).toBe(9);

    // Engine B's port now routed for run A (a stale route): B refuses A's key, and the router's
    // endpoint follows the route's chain back once it names run B again.
    source.set([{ servedName: 'demo', endpoint: url(b), chain: 'run-a' }]);
    await new Promise((r) => setTimeout(r, 300));
    expect((await post(base, '/v1/chat/completions', body)).status).toBe(401);
    source.set([{ servedName: 'demo', endpoint: url(b), chain: 'run-b' }]);
    await new Promise((r) => setTimeout(r, 300));
    const before = await engineMetric(b, 'vllm:request_success_total');
    expect((await post(base, '/v1/chat/completions', body)).status).toBe(200);
    expect(await engineMetric(b, 'vllm:request_success_total')).toBe(before + 1);
  });
});
