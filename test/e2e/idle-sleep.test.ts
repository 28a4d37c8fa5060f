// Idle sleep end to end (issue 38, the autoscaler's ladder): a deployment whose profile sleeps
// after 3 idle seconds, a real control worker, a simulated AUTO host running the fake engine and
// a real router. With no traffic the router's autoscaler puts its replica to sleep on its own (the
// replica says it was asked by `autoscaler:<router id>`, and the router counts it); a request
// afterwards is held, wakes it and is answered 200. The model is `drowsy` in
// test/fixtures/catalog-e2e.yaml.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { findFreePort } from '../../common/ports.js';
import type { DeploymentView, ReplicaView } from '../../common/replica-types.js';
import { deploymentStatusQuery, replicaStatusQuery } from '../../workflows/definitions.js';
import { eventually, inventory, runLlmgw, spawnLlmgw, undeployAndWait, uniqueId, useIsolatedFleet } from '../helpers/fleet.js';

const fleet = useIsolatedFleet({ ownTemporal: 'idle-sleep' });
let client: Client;
const nodeId = uniqueId('drowsy');
const name = uniqueId('drowsy');
const routerId = uniqueId('idle-router');
let routerBase = '';
let adminBase = '';

const replica = async (): Promise<ReplicaView> => {
  const view: DeploymentView = await client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
  const live = view.replicas.find((r) => r.phase !== 'Stopped' && r.phase !== 'Failed');
  if (live === undefined) throw new Error(`${name} has no live replica`);
  return client.workflow.getHandle(live.replicaId).query(replicaStatusQuery);
};

describe('idle replicas sleep on their own', () => {
  beforeAll(async () => {
    client = fleet.client;
    await fleet.agent(nodeId, { inventory: inventory('autox8.yaml') });
    const port = await findFreePort();
    const admin = `127.0.0.1:${await findFreePort()}`;
    const router = spawnLlmgw(['router', '--host', '127.0.0.1', '--port', String(port), '--admin-addr', admin, '--router-id', routerId]);
    await router.waitForOutput(/listening on http/, 60_000);
    routerBase = `http://127.0.0.1:${port}`;
    adminBase = `http://${admin}`;
    const deployed = await runLlmgw(['deploy', 'drowsy', '--name', name, '--replicas', '1', '--wait']);
    expect(deployed.code, deployed.output).toBe(0);
  }, 180_000);

  afterAll(() => undeployAndWait(client, name, [nodeId]).catch(() => undefined));

  it('goes Sleeping with no traffic, asked by the autoscaler, and a request wakes it and is answered', async () => {
    const asleep = await eventually(
      'asleep on its own',
      async () => {
        const r = await replica();
        return r.phase === 'Sleeping' ? r : undefined;
      },
      60_000,
    );
    expect(asleep.reason).toMatch(new RegExp(`asked by autoscaler:${routerId}: idle \\d+ s`));
    // Counted once the Update answers, when every engine sleeps (the route is withdrawn first).
    const counted = new RegExp(`llmgw_autoscaler_sleeps_total\\{deployment="${name}",result="asleep"\\} 1`);
    await eventually('the sleep counted', async () => counted.test(await (await fetch(`${adminBase}/metrics`)).text()), 30_000);

    const res = await fetch(`${routerBase}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'drowsy', max_tokens: 8, messages: [{ role: 'user', content: 'hello' }] }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices?: Array<{ message?: { content?: string } }> };
    expect(body.choices?.[0]?.message?.content ?? '').not.toBe('');
    const woken = await eventually('woken', async () => ((await replica()).sleep?.lastWake ? replica() : undefined), 30_000);
    expect(woken.sleep?.lastWake?.by).toBe(`router:${routerId}`);
  });
});
