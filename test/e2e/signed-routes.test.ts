// Signed routes, end to end (issue 26, point 2), on the reconciliation stack (its own dev server,
// a worker, two agents, a router): a namespace member signals routeChanged naming a listening
// "attacker" endpoint, and hand-starts a replica that adopts it. The attacker receives 0
// requests while the router keeps serving the real replica.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROUTES_WORKFLOW_ID, routeChangedSignal, routesQuery, type RouteEntry } from '../../workflows/routes/definitions.js';
import { replicaStatusQuery } from '../../workflows/definitions.js';
import type { ReplicaInput } from '../../common/replica-types.js';
import { sleep } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';
import { deploy, nodeIds, routed, startReconcileStack, status, stopReconcileStack, withClient } from '../helpers/reconcile-stack.js';

let attacker: Server;
let attackerHits = 0;
let attackerUrl = '';

beforeAll(async () => {
  attacker = createServer((_req, res) => {
    attackerHits++;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'pwned' } }] }),
    );
  });
  await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
  attackerUrl = `http://127.0.0.1:${(attacker.address() as AddressInfo).port}`;
  await startReconcileStack();
});

afterAll(async () => {
  await stopReconcileStack();
  await new Promise((resolve) => attacker?.close(resolve));
});

describe('signed routes', () => {
  it('moves no traffic for a forged routeChanged or a hand-started replica adopting an attacker endpoint', async () => {
    const name = uniqueId('sig-route');
    const view = await deploy('life', name, 1, 'one-gpu');
    expect(await routed(name)).toBe(true);
    const genuine = view.replicas[0]!;
    const [replica, table] = await withClient(async (client) => [
      await client.workflow.getHandle(genuine.replicaId).query(replicaStatusQuery),
      await client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery),
    ]);
    const signedRoute = table.routes.find((r) => r.replicaId === genuine.replicaId)!;
    expect(signedRoute.signature).toMatch(/^v2\./);
    const served = signedRoute.servedName;
    let handStartedId = '';

    await withClient(async (client) => {
      const routes = client.workflow.getHandle(ROUTES_WORKFLOW_ID);
      const forged = (replicaId: string): RouteEntry => ({
        replicaId,
        deployment: name,
        servedName: served,
        endpoint: attackerUrl,
        phase: 'Ready',
        revision: signedRoute.revision ?? '',
      });
      // A signal for a replica that does not exist, one that takes over the genuine replica's
      // route, and one that copies the genuine signature onto the attacker's endpoint.
      await routes.signal(routeChangedSignal, forged(`replica/${name}/77`));
      await routes.signal(routeChangedSignal, forged(genuine.replicaId));
      await routes.signal(routeChangedSignal, { ...forged(`replica/${name}/78`), signature: signedRoute.signature! });
      // A replica started by hand on the control plane's own queue, adopting the attacker's
      // endpoint with the genuine rank 0's ticket copied from its state.
      const leader = replica.shards.find((s) => s.rank === 0)!;
      const history = await client.workflow.getHandle(genuine.replicaId).fetchHistory();
      const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
      const genuineInput = JSON.parse(Buffer.from(payload!.data!).toString('utf8')) as ReplicaInput;
      const input: ReplicaInput = {
        deployment: name,
        seq: 90,
        profile: genuineInput.profile,
        deploymentWorkflowId: `deployment/${name}`,
        adopt: [
          {
            ...leader,
            shardId: `${name}.90.r0.a1`,
            nodeId: nodeIds[0]!,
            managementAddress: '127.0.0.1',
            httpPort: Number(new URL(attackerUrl).port),
          },
        ],
      };
      const handStarted = await client.workflow.start('replica', { taskQueue: 'llmgw', workflowId: `replica/${name}/90`, args: [input] });
      await routes.signal(routeChangedSignal, forged(handStarted.workflowId));
      handStartedId = handStarted.workflowId;
    });

    // Requests keep flowing to the genuine engine while the forged routes are considered.
    let served200 = 0;
    for (let i = 0; i < 40; i++) {
      if (await routed(name)) served200++;
      await sleep(100);
    }
    expect(served200).toBe(40);
    expect(attackerHits).toBe(0);
    const after = await withClient((client) => client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery));
    expect(after.routes.filter((r) => r.endpoint === attackerUrl && r.signature)).toEqual([]);
    expect(after.routes.find((r) => r.replicaId === genuine.replicaId)?.endpoint).toBe(signedRoute.endpoint);
    expect((await status(name)).replicas.map((r) => r.replicaId)).toContain(genuine.replicaId);
    await withClient((client) => client.workflow.getHandle(handStartedId).terminate('test over'));
  });
});
