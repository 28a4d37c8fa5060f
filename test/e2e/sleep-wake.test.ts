// Sleep and wake end to end (issue 38): a real control worker, a simulated AUTO host running the
// fake engine with its vLLM sleep endpoints, and a real router. `llmgw sleep` puts a deployment's
// replica to sleep (its engine stays, its route stays listed, not routable); the next request is
// held and wakes it through the replica's Update and is answered; `llmgw status` shows the level,
// since when and the last wake's duration; minAwakeSeconds refuses a sleep right after a wake
// (unless --force); `llmgw wake` says how long it took; an undeploy stops a sleeping replica.
// The model is `sleepy` in test/fixtures/catalog-e2e.yaml.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { findFreePort } from '../../common/ports.js';
import type { DeploymentView, ReplicaView } from '../../common/replica-types.js';
import { deploymentStatusQuery, replicaStatusQuery } from '../../workflows/definitions.js';
import { enginesOf, eventually, inventory, runLlmgw, spawnLlmgw, undeployAndWait, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const fleet = useIsolatedFleet({ ownTemporal: 'sleep-wake' });
let client: Client;
const nodeId = uniqueId('sleepy');
const name = uniqueId('sleepy');
let routerBase = '';

const view = (): Promise<DeploymentView> => client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
const replica = async (): Promise<ReplicaView> =>
  client.workflow
    .getHandle((await view()).replicas.find((r) => r.phase !== 'Stopped' && r.phase !== 'Failed')!.replicaId)
    .query(replicaStatusQuery);

async function ask(): Promise<{ status: number; ms: number; text: string }> {
  const started = performance.now();
  const res = await fetch(`${routerBase}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sleepy', max_tokens: 8, messages: [{ role: 'user', content: 'hello' }] }),
  });
  const body = (await res.json()) as { choices?: Array<{ message?: { content?: string } }> };
  return { status: res.status, ms: performance.now() - started, text: body.choices?.[0]?.message?.content ?? '' };
}

describe('sleep and wake through llmgw', () => {
  beforeAll(async () => {
    client = fleet.client;
    await fleet.agent(nodeId, { inventory: inventory('autox8.yaml') });
    const port = await findFreePort();
    const router = spawnLlmgw(['router', '--host', '127.0.0.1', '--port', String(port)]);
    await router.waitForOutput(/listening on http/, 60_000);
    routerBase = `http://127.0.0.1:${port}`;
    const deployed = await runLlmgw(['deploy', 'sleepy', '--name', name, '--replicas', '1', '--wait']);
    expect(deployed.code, deployed.output).toBe(0);
  }, 180_000);

  afterAll(() => undeployAndWait(client, name, [nodeId]).catch(() => undefined));

  it('sleeps on `llmgw sleep`, keeping its engine, and shows it', async () => {
    expect((await ask()).status).toBe(200);
    const pids = enginesOf([nodeId]).map((e) => e.pid);
    const slept = await runLlmgw(['sleep', name]);
    expect(slept.code, slept.output).toBe(0);
    expect(slept.output).toMatch(/asleep at level 1/);
    expect((await replica()).phase).toBe('Sleeping');
    expect((await view()).phase).toBe('Sleeping');
    expect(enginesOf([nodeId]).map((e) => e.pid)).toEqual(pids);
    const status = await runLlmgw(['status', name]);
    expect(status.output).toMatch(/Sleeping \(level 1, since \d\d:\d\d:\d\d\)/);
    // The model stays listed while it sleeps.
    const models = (await (await fetch(`${routerBase}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toContain('sleepy');
  });

  it('wakes on the next request, which is answered, and records the wake', async () => {
    const answer = await ask();
    expect(answer.status).toBe(200);
    expect(answer.text).not.toBe('');
    const awake = await eventually('Ready again', async () => ((await replica()).phase === 'Ready' ? replica() : undefined), 30_000);
    expect(awake.sleep?.lastWake?.by).toMatch(/^router:/);
    console.log(`first request after sleep answered in ${answer.ms.toFixed(0)} ms; the wake took ${awake.sleep?.lastWake?.tookMs} ms`);
    const status = await runLlmgw(['status', name]);
    expect(status.output).toMatch(/last wake \d/);
  });

  it('refuses a sleep within minAwakeSeconds unless forced, and `llmgw wake` says how long it took', async () => {
    const refused = await runLlmgw(['sleep', name]);
    expect(refused.code).not.toBe(0);
    expect(refused.output).toMatch(/minAwakeSeconds/);
    const forced = await runLlmgw(['sleep', name, '--force']);
    expect(forced.code, forced.output).toBe(0);
    const woken = await runLlmgw(['wake', name]);
    expect(woken.code, woken.output).toBe(0);
    expect(woken.output).toMatch(/woke in \d/);
  });

  it('stops a sleeping replica on undeploy, its engine gone', async () => {
    const forced = await runLlmgw(['sleep', name, '--force']);
    expect(forced.code, forced.output).toBe(0);
    await undeployAndWait(client, name, [nodeId]);
    expect(enginesOf([nodeId])).toEqual([]);
  });
});
