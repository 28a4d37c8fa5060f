// Signed routes, end to end (issue 26, point 2; issue 37), on the reconciliation stack (its own
// dev server, a worker, two agents, a router): a namespace member signals routeChanged naming a
// listening "attacker" endpoint, hand-starts a replica that adopts it, continues a workflow of
// its own as new into `replica` with a forged Ready state under an ended replica's id, and
// hand-starts a replica that names another deployment's served name. The attacker receives 0
// requests while the router keeps serving the real replica, and nothing forged is signed. And
// deploymentChanged: forged entries that would alias a new name to a deployment's model, rebind
// the deployment's own name, or carry a copied signature change nothing at a router with the key.
// The engine's port and revoked revisions: routes-attested-live.test.ts.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import {
  deploymentChangedSignal,
  ROUTES_WORKFLOW_ID,
  routeChangedSignal,
  routesQuery,
  type DeploymentEntry,
  type RouteEntry,
} from '../../workflows/routes/definitions.js';
import { NativeConnection, Worker } from '@temporalio/worker';
import { replicaStatusQuery } from '../../workflows/definitions.js';
import type { ReplicaInput } from '../../common/replica-types.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { readCatalogKeys } from '../../common/catalog-key.js';
import { signSnapshot } from '../../common/revision-signature.js';
import { testCatalogKeyFile } from '../helpers/catalog-key.js';
import { eventually, sleep } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';
import { useAttacker } from '../helpers/attacker.js';
import {
  deploy,
  nodeIds,
  nodeView,
  port,
  routed,
  router,
  startReconcileStack,
  status,
  stopReconcileStack,
  undeploy,
  withClient,
  causes,
  inputOf,
} from '../helpers/reconcile-stack.js';

const attacker = useAttacker();

beforeAll(startReconcileStack);
afterAll(stopReconcileStack);

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
        endpoint: attacker.url,
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
      const genuineInput = await inputOf(client, genuine.replicaId);
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
            httpPort: Number(new URL(attacker.url).port),
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
    expect(attacker.hits).toBe(0);
    const after = await withClient((client) => client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery));
    expect(after.routes.filter((r) => r.endpoint === attacker.url && r.signature)).toEqual([]);
    expect(after.routes.find((r) => r.replicaId === genuine.replicaId)?.endpoint).toBe(signedRoute.endpoint);
    expect((await status(name)).replicas.map((r) => r.replicaId)).toContain(genuine.replicaId);
    await withClient((client) => client.workflow.getHandle(handStartedId).terminate('test over'));
  });

  it('creates no alias and moves no name for a deploymentChanged signalled by hand', async () => {
    const name = uniqueId('sig-dep');
    await deploy('life', name, 1, 'one-gpu');
    expect(await routed(name)).toBe(true);
    // Its entry once settled: a route can serve before the deployment's own Ready reaches routes,
    // and an entry taken while Progressing would be re-signed under the test as it turns Ready.
    const genuine = await eventually(`deployment ${name} Ready in routes`, async () => {
      const before = await withClient((client) => client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery));
      const entry = before.deployments.find((d) => d.name === name);
      return entry?.phase === 'Ready' ? entry : undefined;
    });
    // The control worker read it from the deployment and signed it.
    expect(genuine.signature).toMatch(/^v2\./);
    const alias = uniqueId('gpt-sub');
    const copied = uniqueId('gpt-copy');
    const forged = (entry: Partial<DeploymentEntry>): DeploymentEntry => ({
      name: alias,
      servedName: genuine.servedName,
      model: genuine.model,
      phase: 'Ready',
      desired: 1,
      ...entry,
    });
    await withClient(async (client) => {
      const routes = client.workflow.getHandle(ROUTES_WORKFLOW_ID);
      // A new name for this deployment's model; the deployment's own name bound to another
      // served name; and the genuine signature copied onto a third name.
      await routes.signal(deploymentChangedSignal, forged({}));
      await routes.signal(deploymentChangedSignal, forged({ name, servedName: uniqueId('elsewhere') }));
      await routes.signal(deploymentChangedSignal, forged({ name: copied, signature: genuine.signature! }));
    });

    // A client asking for the alias is never served by this deployment's model, while the
    // deployment's own name keeps being served.
    const statusOf = async (model: string): Promise<number> => {
      try {
        await router.chat.completions.create({ model, max_tokens: 2, messages: [{ role: 'user', content: 'ping' }] });
        return 200;
      } catch (error) {
        if (error instanceof OpenAI.APIError && error.status !== undefined) return error.status;
        throw error;
      }
    };
    const seen: string[] = [];
    for (let i = 0; i < 40; i++) {
      seen.push(`${await statusOf(alias)} ${await statusOf(copied)} ${await statusOf(name)}`);
      await sleep(100);
    }
    expect(new Set(seen)).toEqual(new Set(['404 404 200']));
    const after = await withClient((client) => client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery));
    expect(after.deployments.filter((d) => d.name === alias || d.name === copied)).toEqual([]);
    expect(after.deployments.find((d) => d.name === name)).toEqual(genuine);
  });

  it("signs no route for a workflow that continues as new into replica with a forged Ready state and an ended replica's ticket", async () => {
    const name = uniqueId('sig-forge');
    const view = await deploy('life', name, 1, 'one-gpu');
    const replicaId = view.replicas[0]!.replicaId;
    const [replica, input] = await withClient(async (client) => [
      await client.workflow.getHandle(replicaId).query(replicaStatusQuery),
      await inputOf(client, replicaId),
    ]);
    const leader = replica.shards.find((s) => s.rank === 0)!;
    expect(leader.ticket).toBeTruthy();
    // The replica ends (its engine stops, its GPUs go back); its id is free again.
    await undeploy(name);
    await withClient((client) =>
      client.workflow
        .getHandle(replicaId)
        .result()
        .catch(() => undefined),
    );

    // A workflow of the attacker's own, under that id, carries the old ticket into `replica`.
    const connection = await NativeConnection.connect({ address: `127.0.0.1:${port}` });
    const queue = uniqueId('forger');
    const worker = await Worker.create({
      connection,
      taskQueue: queue,
      workflowsPath: join(__dirname, '../workflows/index.ts'),
      dataConverter: llmgwDataConverter(),
    });
    const running = worker.run();
    try {
      const forged: ReplicaInput = {
        ...input,
        carried: {
          phase: 'Ready',
          reason: 'forged',
          since: new Date().toISOString(),
          shards: [{ ...leader, managementAddress: '127.0.0.1', httpPort: Number(new URL(attacker.url).port), state: 'Ready' }],
          resume: { step: 'watch' },
        },
      };
      await withClient((client) => client.workflow.start('forgeReplica', { taskQueue: queue, workflowId: replicaId, args: [forged] }));
      // The continued run refuses what it was handed (its seal does not verify: it ends with
      // CarriedStateRefused); a run that took it would publish Ready at the attacker's endpoint
      // and the routes workflow would ask for a signature. Either way nothing may be signed.
      const outcome = async (): Promise<string> =>
        withClient(async (client) => {
          const handle = client.workflow.getHandle(replicaId);
          if ((await handle.describe()).status.name !== 'RUNNING') return 'refused';
          const view = await handle.query(replicaStatusQuery).catch(() => undefined);
          return view?.endpoint === attacker.url ? 'published' : 'pending';
        });
      await expect.poll(outcome, { timeout: 30_000 }).toMatch(/refused|published/);
      await sleep(5_000);
      const table = await withClient((client) => client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery));
      expect(table.routes.filter((r) => r.endpoint === attacker.url && r.signature)).toEqual([]);
      expect(attacker.hits).toBe(0);
    } finally {
      await withClient((client) => client.workflow.getHandle(replicaId).terminate('test over')).catch(() => undefined);
      worker.shutdown();
      await running;
      await connection.close();
    }
  });

  it("signs nothing for a replica that asks to be placed under another deployment's served name", async () => {
    const name = uniqueId('sig-own');
    const view = await deploy('life', name, 1, 'one-gpu');
    const genuineInput = await withClient((client) => inputOf(client, view.replicas[0]!.replicaId));
    // Another model's revision, as the control worker resolves and signs it from the catalog.
    const other = 'another-model';
    const otherInput = {
      ...genuineInput,
      profile: signSnapshot({ ...genuineInput.profile, servedName: other }, readCatalogKeys(testCatalogKeyFile())),
    };
    expect(genuineInput.profile.servedName).not.toBe(other);
    // A replica of `name` started by hand with the other deployment's signed revision.
    const replicaId = `replica/${name}/91`;
    const input: ReplicaInput = { ...otherInput, deployment: name, seq: 91, deploymentWorkflowId: `deployment/${name}` };
    const outcome = await withClient(async (client) => {
      const handle = await client.workflow.start('replica', { taskQueue: 'llmgw', workflowId: replicaId, args: [input] });
      return Promise.race([
        handle.result().then(
          () => 'completed',
          (error: unknown) => causes(error),
        ),
        sleep(30_000).then(() => 'still running'),
      ]);
    });
    expect(outcome).toMatch(
      new RegExp(`asked for served name "${other}", but deployment ${name} serves "${genuineInput.profile.servedName}": nothing is signed`),
    );
    // Nothing was reserved for it on any node, and it never ran.
    for (const nodeId of nodeIds) expect((await nodeView(nodeId)).allocations.map((a) => a.replicaId)).not.toContain(replicaId);
    await withClient((client) => client.workflow.getHandle(replicaId).terminate('test over')).catch(() => undefined);
  });
});
