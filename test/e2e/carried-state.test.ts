// Carried state is authenticated (issue 37), on the reconciliation stack (its own dev server, a
// worker, two agents, a router): a namespace member runs a workflow of their own that continues as
// new into `replica` (a Ready phase holding the placement ticket of a replica that has ended) and
// into `routes` (the table with that replica's old signed route). Neither forgery yields a
// signed route: the replica run ends, refused, and the routes run rebuilds its table from the
// replicas themselves. And a replica of ours whose run refuses what it was handed is rebuilt by
// reconciliation around its engine, which never stops. A forged hand-over into `node` (another
// address, the GPUs a live engine holds freed) is never shown: the node starts from nothing and
// gets its agent's signed registration, and the engine's allocation, back.
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { ROUTES_WORKFLOW_ID, routesQuery, type RouteEntry } from '../../workflows/routes/definitions.js';
import { replicaStatusQuery } from '../../workflows/definitions.js';
import type { ReplicaInput, ReplicaView } from '../../common/replica-types.js';
import type { NodeView } from '../../common/node-types.js';
import type { NodeState } from '../../workflows/node/state.js';
import type { ForgeInput } from '../workflows/forge-carried.js';
import { eventually, runLlmgw, sleep } from '../helpers/processes.js';
import { uniqueId } from '../helpers/temporal.js';
import { useAttackerOnReconcileStack } from '../helpers/attacker-worker.js';
import { actionOfAnyRun, deploy, env, nodeView, reconcile, routed, status, withClient } from '../helpers/reconcile-stack.js';

const attackerQueue = useAttackerOnReconcileStack(join(__dirname, '../workflows/forge-carried.ts'));

/** The routes table as routers get it: who, where, and whether it is signed. */
function signedRoutes(routes: RouteEntry[]): string[] {
  return routes.filter((r) => r.signature && (r.phase === 'Ready' || r.phase === 'Unknown')).map((r) => `${r.replicaId} ${r.endpoint}`);
}

async function startInput<T = ReplicaInput>(client: Client, workflowId: string): Promise<T> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  return JSON.parse(Buffer.from(payload!.data!).toString('utf8')) as T;
}

/** Deploys one replica of `life`, notes its state, ticket and signed route, and scales it to zero. */
async function endedReplica(name: string): Promise<{ view: ReplicaView; route: RouteEntry; input: ReplicaInput }> {
  const { replicaId } = (await deploy('life', name, 1, 'one-gpu')).replicas[0]!;
  const noted = await eventually(`${replicaId} Ready with a signed route`, () =>
    withClient(async (client) => {
      const route = (await client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery)).routes.find((r) => r.replicaId === replicaId);
      if (!route?.signature) return undefined;
      const view = await client.workflow.getHandle(replicaId).query(replicaStatusQuery);
      return { view, route, input: await startInput(client, replicaId) };
    }),
  );
  expect(noted.view.shards[0]!.ticket).toBeTruthy();
  const scaled = await runLlmgw(['scale', name, '0'], env);
  expect(scaled.code, scaled.output).toBe(0);
  await eventually(
    `${replicaId} closed and unrouted`,
    () =>
      withClient(async (client) => {
        const closed = (await client.workflow.getHandle(replicaId).describe()).status.name !== 'RUNNING';
        const table = await client.workflow.getHandle(ROUTES_WORKFLOW_ID).query(routesQuery);
        return closed && !signedRoutes(table.routes).some((r) => r.startsWith(`${replicaId} `)) ? true : undefined;
      }),
    60_000,
  );
  return noted;
}

const tableNow = (): Promise<string[] | undefined> =>
  withClient(async (client) => {
    const table = await client.workflow
      .getHandle(ROUTES_WORKFLOW_ID)
      .query(routesQuery)
      .catch(() => undefined);
    return table ? signedRoutes(table.routes).sort() : undefined;
  });

describe('carried state', () => {
  const keep = uniqueId('carry-keep');
  let replicaGone: Awaited<ReturnType<typeof endedReplica>>;
  let routeGone: Awaited<ReturnType<typeof endedReplica>>;

  beforeAll(async () => {
    await deploy('life', keep, 1, 'one-gpu');
    replicaGone = await endedReplica(uniqueId('carry-replica'));
    routeGone = await endedReplica(uniqueId('carry-route'));
  });

  it("a forged hand-over into replica (Ready, an ended replica's ticket) serves nothing and gets no signed route", async () => {
    const { view, input } = replicaGone;
    const forged: ForgeInput = {
      workflowType: 'replica',
      taskQueue: 'llmgw',
      input: {
        ...input,
        carried: {
          ...({ phase: 'Ready', reason: 'serving', since: new Date().toISOString(), shards: view.shards } satisfies Partial<ReplicaView>),
          placements: 1,
          failedPlacements: 0,
          restartsHere: 0,
          restarts: 0,
          avoidNodes: [],
          nodeSeen: {},
          resume: { step: 'watch' },
        },
      },
    };
    await withClient((client) =>
      client.workflow.start('forgeCarried', { taskQueue: attackerQueue, workflowId: view.replicaId, args: [forged] }),
    );
    for (let i = 0; i < 20; i++) {
      expect((await tableNow())?.filter((r) => r.startsWith(`${view.replicaId} `))).toEqual([]);
      await sleep(500);
    }
    const ended = await eventually('the forged replica run ended', () =>
      withClient(async (client) => {
        const description = await client.workflow.getHandle(view.replicaId).describe();
        return description.type === 'replica' && description.status.name !== 'RUNNING' ? description : undefined;
      }),
    );
    expect(ended.status.name).toBe('FAILED');
    expect(await routed(keep)).toBe(true);
  });

  it("a forged hand-over into routes (an ended replica's signed route) leaves the table as the replicas have it", async () => {
    const before = (await tableNow())!;
    expect(before.some((r) => r.startsWith(`replica/${keep}/`))).toBe(true);
    const forged: ForgeInput = {
      workflowType: 'routes',
      taskQueue: 'llmgw',
      input: {
        carried: {
          epoch: 'forged',
          version: 1_000,
          routes: [{ ...routeGone.route, phase: 'Ready' }],
          deployments: [],
          routableSince: { [routeGone.route.replicaId]: 1_000 },
          routers: [],
        },
      },
    };
    // Ends the running table and continues into `routes` in one call, as a namespace member may.
    await withClient((client) =>
      client.workflow.start('forgeCarried', {
        taskQueue: attackerQueue,
        workflowId: ROUTES_WORKFLOW_ID,
        workflowIdConflictPolicy: 'TERMINATE_EXISTING',
        args: [forged],
      }),
    );
    await eventually('the routes workflow running our own code again', () =>
      withClient(async (client) => ((await client.workflow.getHandle(ROUTES_WORKFLOW_ID).describe()).type === 'routes' ? true : undefined)),
    );
    const seen: string[][] = [];
    for (let i = 0; i < 20; i++) {
      const table = await tableNow();
      if (table) seen.push(table);
      await sleep(500);
    }
    expect(seen.flat().filter((r) => r.startsWith(`${routeGone.route.replicaId} `))).toEqual([]);
    expect(
      await eventually('the table seeded again', async () => ((await tableNow())?.length === before.length ? tableNow() : undefined)),
    ).toEqual(before);
    expect(await routed(keep)).toBe(true);
    expect((await status(keep)).phase).toBe('Ready');
  });

  it('a replica whose run refused what it was handed is rebuilt by reconciliation around the same engine', async () => {
    const name = uniqueId('carry-adopt');
    const genuine = (await deploy('life', name, 1, 'one-gpu')).replicas[0]!;
    const leader = genuine.shards[0]!;
    const input = await withClient((client) => startInput(client, genuine.replicaId));
    // The genuine run is ended and followed by one handed its own state, unsealed.
    const forged: ForgeInput = {
      workflowType: 'replica',
      taskQueue: 'llmgw',
      input: {
        ...input,
        carried: { phase: 'Ready', reason: 'serving', since: genuine.since, shards: genuine.shards, resume: { step: 'watch' } },
      },
    };
    await withClient((client) =>
      client.workflow.start('forgeCarried', {
        taskQueue: attackerQueue,
        workflowId: genuine.replicaId,
        workflowIdConflictPolicy: 'TERMINATE_EXISTING',
        args: [forged],
      }),
    );
    await eventually('the refused run ended', () =>
      withClient(async (client) => {
        const description = await client.workflow.getHandle(genuine.replicaId).describe();
        return description.type === 'replica' && description.status.name === 'FAILED' ? true : undefined;
      }),
    );
    await reconcile(leader.nodeId);
    const rebuilt = await actionOfAnyRun(leader.nodeId, (a) => a.kind === 'rebuild' && a.replicaId === genuine.replicaId);
    expect(rebuilt, 'a rebuild of the replica').toBeDefined();
    const view = await eventually(`${genuine.replicaId} Ready again`, () =>
      withClient(async (client) => {
        const handle = client.workflow.getHandle(genuine.replicaId);
        if ((await handle.describe()).status.name !== 'RUNNING') return undefined;
        const now = await handle.query(replicaStatusQuery).catch(() => undefined);
        return now?.phase === 'Ready' ? now : undefined;
      }),
    );
    expect(view.shards[0]!.pid).toBe(leader.pid);
  });

  it("a forged hand-over into node (another address, a live engine's GPUs freed) is never shown, and the agent registers again", async () => {
    const shard = (await status(keep)).replicas[0]!.shards[0]!;
    const nodeId = shard.nodeId;
    const workflowId = `node/${nodeId}`;
    const genuine = await nodeView(nodeId);
    const address = genuine.inventory!.managementAddress;
    const forgedAddress = address === '127.0.0.2' ? '127.0.0.3' : '127.0.0.2';
    const held = (v: NodeView): boolean =>
      v.allocations.some((a) => a.shardId === shard.shardId && a.gpuIndices.join() === shard.gpuIndices.join());
    expect(held(genuine)).toBe(true);
    const carried: NodeState = {
      nodeId,
      phase: 'Ready',
      reason: 'agent registered',
      cordoned: false,
      inventory: { ...genuine.inventory!, managementAddress: forgedAddress },
      allocations: [],
      lastRegisteredAt: genuine.lastRegisteredAt,
      notReadySince: undefined,
      registrations: genuine.registrations,
      waiters: [],
      released: [],
      enrolled: true,
      // Every genuine registration from now on would look like a replay.
      lastSignedAt: '9999-01-01T00:00:00.000Z',
    };
    const input = await withClient((client) => startInput<Record<string, unknown>>(client, workflowId));
    const forged: ForgeInput = { workflowType: 'node', taskQueue: 'llmgw', input: { ...input, carried } };
    const forgedAt = Date.now();
    await withClient((client) =>
      client.workflow.start('forgeCarried', {
        taskQueue: attackerQueue,
        workflowId,
        workflowIdConflictPolicy: 'TERMINATE_EXISTING',
        args: [forged],
      }),
    );
    await eventually('the node workflow running our own code again', () =>
      withClient(async (client) => ((await client.workflow.getHandle(workflowId).describe()).type === 'node' ? true : undefined)),
    );
    const isBack = (v: NodeView): boolean =>
      v.phase === 'Ready' && v.enrolled === true && v.inventory?.managementAddress === address && held(v);
    // What placement, the ticket signer and the route signer read: never the forged address, and
    // never a schedulable node that shows the engine's GPUs free.
    const shown: string[] = [];
    let backAfterMs: number | undefined;
    for (let i = 0; i < 20; i++) {
      const view = await nodeView(nodeId).catch(() => undefined);
      if (view?.inventory?.managementAddress === forgedAddress) shown.push(`address ${forgedAddress}`);
      if (view?.phase === 'Ready' && view.enrolled && !held(view)) shown.push(`GPUs ${shard.gpuIndices.join(',')} free`);
      if (view && backAfterMs === undefined && isBack(view)) backAfterMs = Date.now() - forgedAt;
      await sleep(500);
    }
    expect(shown).toEqual([]);
    // The refused run asked its agent to register: back within the window, not at a watchdog's leisure.
    expect(backAfterMs, 'the agent registered again within 10 s').toBeLessThan(10_000);
    console.log(`node back at the agent's address with the engine's allocation ${backAfterMs} ms after the forged hand-over`);
    const back = await nodeView(nodeId);
    expect(back.allocations.filter((a) => a.gpuIndices.some((g) => shard.gpuIndices.includes(g)))).toHaveLength(1);
    expect(await routed(keep)).toBe(true);
    expect((await status(keep)).phase).toBe('Ready');
  });
});
