// Serving through a Temporal that lost its data, on the reconciliation stack (its own dev
// server, a worker, two agents and a router): the router holds the routes Temporal forgot while
// their engines answer, a drain during the hold still leaves at once, and no request fails.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { enginesOf, eventually, runLlmgw, sleep } from '../helpers/processes.js';
import { startLoad, summarise } from '../helpers/load.js';
import { uniqueId } from '../helpers/temporal.js';
import {
  agents,
  deploy,
  env,
  inventoryDir,
  nodeIds,
  raceNodes,
  restartTemporalEmpty,
  routed,
  router,
  routerHealth,
  routerProc,
  startAgent,
  status,
  undeploy,
  useReconcileStack,
} from '../helpers/reconcile-stack.js';

useReconcileStack();

describe('serving while Temporal forgets', () => {
  it('serves through a Temporal that lost its data: 0 failed requests, forgotten routes held while their engines answer, a drain during the hold leaves at once', async () => {
    // A host whose agent is down while Temporal is rebuilt: its engine is held by the router
    // (it still answers) until its agent returns and reconciliation lists it again.
    const holdNode = uniqueId('rec-hold');
    raceNodes.push(holdNode);
    await startAgent(holdNode, join(inventoryDir, 'holdx8.yaml'));
    const kept = uniqueId('rec-kept');
    const drained = uniqueId('rec-drain');
    await deploy('hold', kept, 1, 'one-gpu');
    // deploy --wait returns once the routers route to it: a request at once is served.
    expect(await routed(kept)).toBe(true);
    await deploy('life', drained, 2, 'one-gpu');
    expect(await routed(drained)).toBe(true);
    const keptEndpoint = (await status(kept)).replicas[0]!.endpoint;
    const enginePids = () =>
      enginesOf([...nodeIds, holdNode])
        .map((e) => e.pid)
        .sort();
    const pidsBefore = enginePids();
    const routerUrl = router.baseURL.replace(/\/v1$/, '');
    const loads = [kept, drained].map((model) => startLoad({ routerUrl, model, plainClients: 1, everyMs: 50 }));
    await sleep(500);

    await agents.get(holdNode)!.proc.kill9();
    const lostAt = Date.now();
    await restartTemporalEmpty();
    await eventually(
      `${drained} rebuilt and routed while ${kept} is held`,
      async () => {
        const view = await status(drained).catch(() => undefined);
        const held = (await routerHealth()).routes.held.map((h) => h.endpoint);
        return view?.phase === 'Ready' && view.ready === 2 && held.length === 1 && held[0] === keptEndpoint;
      },
      60_000,
      250,
    );

    // Scale down during the hold: the replica withdrawn leaves the router within a second.
    const scaled = await runLlmgw(['scale', drained, '1'], env);
    expect(scaled.code, scaled.output).toBe(0);
    const leaving = await eventually(
      'a replica draining',
      async () => (await status(drained)).replicas.find((r) => r.phase === 'Draining' || r.phase === 'Stopped'),
      20_000,
      50,
    );
    const withdrawnAt = Date.now();
    await sleep(2_000);
    const toLeaving = loads[1]!.samples.filter((x) => x.endpoint === leaving.endpoint).map((x) => x.start);
    const lastToLeaving = Math.max(0, ...toLeaving) - withdrawnAt;
    console.log(`last request to the drained replica sent ${lastToLeaving} ms after it was seen Draining`);
    expect(lastToLeaving).toBeLessThan(1000);
    expect((await routerHealth()).routes.held.map((h) => h.endpoint)).toEqual([keptEndpoint]);

    // The host's agent returns: reconciliation adopts its engine, Temporal lists it, the hold ends.
    await startAgent(holdNode, join(inventoryDir, 'holdx8.yaml'));
    await eventually('the held route listed again', async () => (await routerHealth()).routes.held.length === 0, 60_000, 250);
    const samples = (await Promise.all(loads.map((l) => l.stop()))).flat();
    const holdLines = routerProc
      .output()
      .split('\n')
      .filter((l) => /no longer held after/.test(l));
    console.log(`Temporal lost at +0; ${summarise(samples)} over ${((Date.now() - lostAt) / 1000).toFixed(1)} s\n${holdLines.join('\n')}`);
    expect(samples.filter((x) => !x.ok).map((x) => x.error)).toEqual([]);
    // The engines never stopped: the same processes, but the one drained by the scale-down.
    expect(enginePids().every((pid) => pidsBefore.includes(pid))).toBe(true);
    expect(enginePids()).toHaveLength(pidsBefore.length - 1);
    expect(samples.filter((x) => x.endpoint === keptEndpoint).length).toBeGreaterThan(0);
    await undeploy(drained);
    await undeploy(kept);
  }, 240_000);
});
