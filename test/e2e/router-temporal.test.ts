// The router learns its routes from Temporal: replica workflows (a stand-in publishing the real
// memo and search attributes) on a real dev server, real fake engines, real HTTP. A replica that
// turns Ready is routable within a second, and one that starts draining gets no new request
// after a second.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client, WorkflowHandle } from '@temporalio/client';
import { fakeEngineOptions } from '../../fake-engine/options.js';
import { startFakeEngine, type FakeEngine } from '../../fake-engine/server.js';
import { replicaWorkflowId } from '../../common/names.js';
import { TemporalRouteSource } from '../../router/routes/visibility.js';
import { startRouter, type Router } from '../../router/http/server.js';
import { testClient, uniqueId, withWorker } from '../helpers/temporal.js';
import { setFakeReplicaPhaseSignal, type FakeReplicaInput } from '../workflows/fake-replica.js';

const ROUTABLE_WITHIN_MS = 1000;

let client: Client;
let closeClient: () => Promise<void>;
const engines: FakeEngine[] = [];

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
});
afterAll(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close(0)));
  await closeClient?.();
});

async function engine(servedName: string): Promise<FakeEngine> {
  const e = await startFakeEngine(fakeEngineOptions({ model: 'demo', servedModelNames: [servedName] }));
  engines.push(e);
  return e;
}

const endpointOf = (e: FakeEngine) => `http://127.0.0.1:${e.port}`;
/** Which fake engine answered: its ids carry a per-engine random prefix. */
const engineOf = (id: string) => id.replace(/^[a-z]+-/, '').slice(0, 12);

/** The id prefix an engine puts on its answers, asked of it directly. */
async function idOf(e: FakeEngine): Promise<string> {
  const res = await fetch(`${endpointOf(e)}/v1/chat/completions`, {
    method: 'POST',
    body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], max_tokens: 1 }),
  });
  return engineOf(((await res.json()) as { id: string }).id);
}

async function ask(router: Router, model: string): Promise<{ status: number; engine: string | undefined }> {
  const res = await fetch(`http://127.0.0.1:${router.port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    // Prompts that share nothing: cache-aware routing spreads them by load.
    body: JSON.stringify({ model, messages: [{ role: 'user', content: `hi ${Math.random()}` }], max_tokens: 2 }),
  });
  const body = (await res.json()) as { id?: string };
  return { status: res.status, engine: res.status === 200 && body.id ? engineOf(body.id) : undefined };
}

describe('router: routes from Temporal', () => {
  it('routes to a replica within 1 s of it turning Ready, and stops within 1 s of it draining', async () => {
    const taskQueue = uniqueId('router-replicas');
    const deployment = uniqueId('rt');
    const servedName = `${deployment}-model`;
    const [a, b] = [await engine(servedName), await engine(servedName)];
    const [aId, bId] = [await idOf(a), await idOf(b)];
    const handles: WorkflowHandle[] = [];
    const start = async (seq: number, input: Partial<FakeReplicaInput>) => {
      const workflowId = replicaWorkflowId(deployment, seq);
      const full: FakeReplicaInput = {
        deployment,
        servedName,
        model: 'demo',
        replicaId: workflowId,
        phase: 'Loading',
        endpoint: '',
        ...input,
      };
      const handle = await client.workflow.start('replica', { taskQueue, workflowId, args: [full] });
      handles.push(handle);
      return handle;
    };

    const logs: string[] = [];
    const router = await startRouter({
      source: new TemporalRouteSource({
        connect: async () => (await testClient()).client,
        description: 'test dev server',
        log: (l) => logs.push(l),
      }),
      port: 0,
      log: (l) => logs.push(l),
    });
    try {
      await withWorker({ taskQueue, workflowsPath: join(__dirname, '../workflows/fake-replica-as-replica.ts') }, async () => {
        // Loading, no endpoint yet: the model is known, so a client hears 503, not 404.
        const first = await start(1, { phase: 'Loading' });
        const deadline = Date.now() + 10_000;
        while ((await ask(router, servedName)).status !== 503) {
          if (Date.now() > deadline) throw new Error(`the Loading replica never showed up as 503 (${logs.join('; ')})`);
          await new Promise((r) => setTimeout(r, 50));
        }

        // Ready → routable within a second.
        const readyAt = performance.now();
        await first.signal(setFakeReplicaPhaseSignal, { phase: 'Ready', endpoint: endpointOf(a) });
        let served = await ask(router, servedName);
        while (served.status !== 200 && performance.now() - readyAt < 5000) {
          await new Promise((r) => setTimeout(r, 20));
          served = await ask(router, servedName);
        }
        const routableAfter = performance.now() - readyAt;
        expect(served).toEqual({ status: 200, engine: aId });
        expect(routableAfter).toBeLessThan(ROUTABLE_WITHIN_MS);

        // A second replica; once both take traffic, drain the first.
        await start(2, { phase: 'Ready', endpoint: endpointOf(b) });
        while ((await ask(router, servedName)).engine !== bId) {
          if (Date.now() > deadline + 10_000) throw new Error('the second replica never got traffic');
        }
        const drainAt = performance.now();
        await first.signal(setFakeReplicaPhaseSignal, { phase: 'Draining' });
        // Requests sent after the first second must all go to the replica that is not draining.
        let lastToDraining = 0;
        while (performance.now() - drainAt < ROUTABLE_WITHIN_MS + 1000) {
          const sentAt = performance.now();
          const answer = await ask(router, servedName);
          expect(answer.status).toBe(200);
          if (answer.engine === aId) lastToDraining = sentAt - drainAt;
        }
        expect(lastToDraining).toBeLessThan(ROUTABLE_WITHIN_MS);
        expect(router.health().routes.state).toBe('ok');

        for (const handle of handles) await handle.signal(setFakeReplicaPhaseSignal, { phase: 'Stopped' });
        for (const handle of handles) await handle.result();
      });
    } finally {
      await router.close(0);
      for (const handle of handles) await handle.terminate('test over').catch(() => undefined);
    }
  });

  it('comes up while Temporal is unreachable, says so, and finds its routes once Temporal answers', async () => {
    const taskQueue = uniqueId('router-replicas');
    const deployment = uniqueId('rt');
    const servedName = `${deployment}-model`;
    const e = await engine(servedName);
    let reachable = false;
    const logs: string[] = [];
    const source = new TemporalRouteSource({
      connect: async () => {
        if (!reachable) throw new Error('connect ECONNREFUSED 127.0.0.1:7233');
        return (await testClient()).client;
      },
      description: 'test dev server',
    });
    const router = await startRouter({ source, port: 0, log: (l) => logs.push(l) });
    const workflowId = replicaWorkflowId(deployment, 1);
    try {
      expect(router.health()).toMatchObject({
        status: 'degraded',
        routes: { state: 'unreachable', error: expect.stringContaining('ECONNREFUSED') },
      });
      expect((await ask(router, servedName)).status).toBe(404);
      await withWorker({ taskQueue, workflowsPath: join(__dirname, '../workflows/fake-replica-as-replica.ts') }, async () => {
        const input: FakeReplicaInput = {
          deployment,
          servedName,
          model: 'demo',
          replicaId: workflowId,
          phase: 'Ready',
          endpoint: endpointOf(e),
        };
        const handle = await client.workflow.start('replica', { taskQueue, workflowId, args: [input] });
        reachable = true;
        const deadline = Date.now() + 5000;
        while ((await ask(router, servedName)).status !== 200) {
          if (Date.now() > deadline) throw new Error(`routes never caught up (${logs.join('; ')})`);
          await new Promise((r) => setTimeout(r, 50));
        }
        expect(router.health().status).toBe('ok');
        expect(logs.filter((l) => l.includes('unreachable'))).toHaveLength(1);
        expect(logs.filter((l) => l.includes('reachable again'))).toHaveLength(1);
        await handle.signal(setFakeReplicaPhaseSignal, { phase: 'Stopped' });
        await handle.result();
      });
    } finally {
      await router.close(0);
      await client.workflow
        .getHandle(workflowId)
        .terminate('test over')
        .catch(() => undefined);
    }
  });
});
