// A router stops cleanly whatever Temporal is doing: SIGTERM with a stream in flight while its
// Temporal call waits to be retried lets the stream finish and exits 0, and a connection closed
// under a call in retry ends that call instead of throwing from the retry's timer.
import { Client, Connection } from '@temporalio/client';
import { afterAll, describe, expect, it } from 'vitest';
import { findFreePort } from '../../common/ports.js';
import { LazyRoutesClient } from '../../router/routes/temporal-client.js';
import { watchRoutesUpdate } from '../../workflows/routes/definitions.js';
import { base, start, useFakeEngineHarness } from '../helpers/fake-engine-harness.js';
import { startFakeTemporal, type FakeTemporal } from '../helpers/fake-temporal.js';
import { eventually, sleep, spawnLlmgw, stopAll } from '../helpers/processes.js';

useFakeEngineHarness();
const temporals: FakeTemporal[] = [];
afterAll(async () => {
  await stopAll();
  await Promise.all(temporals.map((t) => t.close()));
});

const SERVED = 'shutdown-model';
const routeTable = (endpoint: string) => ({
  epoch: 'fake-epoch',
  version: 1,
  routes: [{ replicaId: 'replica/shutdown/1', deployment: 'shutdown', servedName: SERVED, endpoint, phase: 'Ready' as const }],
  deployments: [],
});

describe('router shutdown', () => {
  it('closes a connection under a call in retry without throwing from the retry timer: the call ends CANCELLED', async () => {
    const fake = await startFakeTemporal(routeTable('http://127.0.0.1:1'));
    temporals.push(fake);
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      const lazy = new LazyRoutesClient(async (interceptors) => {
        const connection = await Connection.connect({ address: fake.address, interceptors });
        return new Client({ connection });
      });
      const client = await lazy.get();
      fake.fail();
      const call = client.workflow
        .getHandle('routes')
        .executeUpdate(watchRoutesUpdate, { args: [{ routerId: 't', after: -1, applied: -1 }], updateId: 'shutdown-test' })
        .then(
          () => 'answered',
          (err: unknown) => String((err as Error).cause ?? err),
        );
      // The first attempt was refused; its retry waits a second or more on a timer.
      await eventually('the first attempt refused', () => (fake.calls.UpdateWorkflowExecution ?? 0) >= 1, 5_000, 10);
      await sleep(50);
      await lazy.close();
      const outcome = await Promise.race([call, sleep(6_000).then(() => 'still waiting')]);
      // The timer fired on a closed connection: without the guard grpc-js throws from it.
      await sleep(200);
      expect(uncaught.map(String)).toEqual([]);
      expect(outcome).toMatch(/CANCELLED|closed its Temporal connection/);
      expect(fake.calls.UpdateWorkflowExecution).toBe(1);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });

  it('on SIGTERM with a stream in flight and a Temporal call in retry: the stream completes, nothing is thrown, exit code 0', async () => {
    const engine = await start({ model: SERVED, tokensPerSecond: 25 });
    const fake = await startFakeTemporal(routeTable(base(engine)));
    temporals.push(fake);
    const port = await findFreePort();
    // The stand-in Temporal serves its table unsigned: this router is one without keys, which
    // starts only when told --insecure-routes.
    const router = spawnLlmgw(
      ['router', '--port', String(port), '--host', '127.0.0.1', '--admin-addr', 'off', '--shutdown-grace', '20', '--insecure-routes'],
      {
        TEMPORAL_ADDRESS: fake.address,
        LLMGW_CATALOG_PUBLIC_KEY_FILE: '',
        LLMGW_CATALOG_KEY_FILE: '',
      },
    );
    const url = `http://127.0.0.1:${port}/v1/chat/completions`;
    const ask = (stream: boolean, maxTokens: number) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: SERVED, stream, max_tokens: maxTokens, messages: [{ role: 'user', content: 'hi' }] }),
      });
    await eventually(
      'the router serves the route from its stand-in Temporal',
      async () => (await ask(false, 1)).status === 200,
      30_000,
      200,
    );

    // About two seconds of tokens.
    const streamed = await ask(true, 50);
    expect(streamed.status).toBe(200);
    const reader = streamed.body!.getReader();
    let text = new TextDecoder().decode((await reader.read()).value);
    fake.fail();
    await eventually('the held long poll refused', () => (fake.calls.UpdateWorkflowExecution ?? 0) >= 2, 5_000, 20);
    process.kill(router.pid, 'SIGTERM');
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const code = await Promise.race([router.exited, sleep(30_000).then(() => 'hung')]);
    const output = router.output();
    const chunks = text.split('\n').filter((l) => l.startsWith('data: {')).length;
    console.log(`stream finished with ${chunks} chunks after SIGTERM; router exited ${String(code)}`);
    expect(text.trim().endsWith('data: [DONE]'), text.slice(-300)).toBe(true);
    expect(chunks).toBeGreaterThanOrEqual(40);
    expect(code, output).toBe(0);
    expect(output).not.toMatch(/Channel has been shut down|uncaught|Error:/i);
    expect(output).toMatch(/router: stopped/);
  });
});
