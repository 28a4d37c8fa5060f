// Signed placements, end to end (issue 26, point 3): a namespace member with a worker of its
// own sends startShard to a real agent's `agent/<node>` queue with a validly signed revision
// but a placement of its choosing. The agent refuses each, naming why, and starts nothing.
import { join } from 'node:path';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Worker, NativeConnection } from '@temporalio/worker';
import type { Client } from '@temporalio/client';
import { WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure, ApplicationFailure } from '@temporalio/common';
import { clone, create } from '@bufbuild/protobuf';
import { StartShardSchema, WaitHealthySchema, type RunningShard, type StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { findFreePort } from '../../common/ports.js';
import { temporalAddress, testClient, uniqueId } from '../helpers/temporal.js';
import { enginesOf, killEnginesOf, spawnControlWorker, spawnLlmgw, stopAll } from '../helpers/processes.js';
import { fakeShardSpec } from '../helpers/shards.js';
import { placeWithTestKey, ticketFor } from '../helpers/catalog-key.js';

const nodeId = uniqueId('tickets');
let client: Client;
let closeClient: () => Promise<void>;
let attackerWorker: Worker;
let attackerRun: Promise<void>;
let connection: NativeConnection;
const attackerQueue = uniqueId('attacker');

/** startShard on the agent's queue from a workflow of the attacker's worker, under `workflowId`. */
function start(spec: StartShard, workflowId = spec.replicaId): Promise<RunningShard> {
  return client.workflow.execute('agentCall', {
    taskQueue: attackerQueue,
    workflowId,
    args: [nodeId, 'startShard', spec],
  }) as Promise<RunningShard>;
}

async function refusal(spec: StartShard, workflowId?: string): Promise<ApplicationFailure> {
  const failure = await start(spec, workflowId).catch((error: unknown) => error);
  expect(failure).toBeInstanceOf(WorkflowFailedError);
  const cause = ((failure as WorkflowFailedError).cause as ActivityFailure).cause as ApplicationFailure;
  expect(cause).toBeInstanceOf(ApplicationFailure);
  return cause;
}

/** A spec as the genuine one, with its genuine ticket, then changed by the attacker. */
function tampered(genuine: StartShard, change: (s: StartShard) => void): StartShard {
  const copy = clone(StartShardSchema, genuine);
  change(copy);
  return copy;
}

beforeAll(async () => {
  ({ client, close: closeClient } = await testClient());
  const controlWorker = spawnControlWorker();
  connection = await NativeConnection.connect({ address: temporalAddress() });
  attackerWorker = await Worker.create({
    connection,
    taskQueue: attackerQueue,
    workflowsPath: join(__dirname, '../workflows/index.ts'),
    dataConverter: llmgwDataConverter(),
  });
  attackerRun = attackerWorker.run();
  await controlWorker;
  const from = ((await findFreePort()) % 20000) + 30000;
  const agent = spawnLlmgw([
    'agent',
    '--node-id',
    nodeId,
    '--gpus',
    'builtin:h100x8',
    '--managed-gpus',
    '0,1,2,3',
    '--state-dir',
    mkdtempSync(join(tmpdir(), 'llmgw-tickets-')),
    '--port-range',
    `${from}-${from + 20}`,
    '--reconcile',
    'dry-run',
  ]);
  await agent.waitForOutput(/registered with node\//, 60_000);
});

afterAll(async () => {
  attackerWorker?.shutdown();
  await attackerRun?.catch(() => undefined);
  await stopAll();
  await killEnginesOf([nodeId]);
  await connection?.close();
  await closeClient?.();
});

describe('signed placements', () => {
  it('refuses starts whose leader, GPUs or port the control worker did not place, naming why, and starts no process', async () => {
    // The genuine shard: placed by the control worker on GPU 0, sent by its replica's workflow.
    const genuine = fakeShardSpec({ nodeId, deployment: 'ticket-genuine', gpus: [0], args: ['--load-time', '0'] });
    const running = await start(genuine);
    await client.workflow.execute('agentCall', {
      taskQueue: attackerQueue,
      workflowId: uniqueId('wait'),
      args: [nodeId, 'waitHealthy', create(WaitHealthySchema, { shardId: genuine.shardId, timeoutSeconds: 30 })],
    });
    const enginePids = enginesOf([nodeId]).map((e) => e.pid);
    expect(enginePids).toEqual([running.status!.pid]);

    // A worker rank of a two-node placement, pointed at a Ray leader outside the fleet.
    const rank1 = placeWithTestKey(
      Object.assign(fakeShardSpec({ nodeId, deployment: 'ticket-ray', gpus: [1], args: ['--load-time', '0'] }), {
        rank: 1,
        nnodes: 2,
        leaderAddress: '198.18.0.1',
        leaderPort: 6379,
      }),
    );
    const cases: [string, StartShard, string | undefined, RegExp][] = [
      [
        'leader outside the fleet',
        tampered(rank1, (s) => (s.leaderAddress = '203.0.113.66')),
        undefined,
        /leader address "203\.0\.113\.66" is not the registered address of its placement's rank 0 \(198\.18\.0\.1, node /,
      ],
      ['GPUs it does not manage', tampered(genuine, (s) => (s.gpuIndices = [6])), undefined, /its GPUs \[6\] is not the placed \[0\]/],
      ['port 22', tampered(genuine, (s) => (s.httpPort = 22)), undefined, /its httpPort 22 is not the placed 0/],
      ['no ticket', tampered(genuine, (s) => (s.placementTicket = '')), undefined, /carries no placement ticket/],
      [
        'a genuine ticket from another workflow',
        genuine,
        uniqueId('attacker-wf'),
        /sent by workflow attacker-wf.*ticket is replica replica\/ticket-genuine\/1's/,
      ],
      // Even a ticket the control worker did sign cannot take what the agent does not manage,
      // what another shard holds, or a privileged port: the agent checks its own facts too.
      [
        'signed, but GPUs it does not manage',
        placeWithTestKey(fakeShardSpec({ nodeId, deployment: 'ticket-unmanaged', gpus: [6] })),
        undefined,
        /GPU 6 is not managed by this agent \(it manages 0,1,2,3\)/,
      ],
      [
        'signed, but GPUs another shard holds',
        placeWithTestKey(fakeShardSpec({ nodeId, deployment: 'ticket-held', gpus: [0] })),
        undefined,
        new RegExp(`GPU 0 is held by shard ${genuine.shardId.replace(/\./g, '\\.')}, which is still running`),
      ],
      [
        'signed, but port 22',
        placeWithTestKey(Object.assign(fakeShardSpec({ nodeId, deployment: 'ticket-port', gpus: [2] }), { httpPort: 22 })),
        undefined,
        /httpPort 22 is a privileged port/,
      ],
    ];
    for (const [what, spec, workflowId, reason] of cases) {
      const failure = await refusal(spec, workflowId);
      expect(failure.type, what).toBe('PlacementRefused');
      expect(failure.nonRetryable, what).toBe(true);
      expect(failure.message, what).toMatch(reason);
      // Nothing started: still only the genuine engine.
      expect(
        enginesOf([nodeId]).map((e) => e.pid),
        what,
      ).toEqual(enginePids);
    }
    // The copied genuine ticket is still the genuine replica's: its own start is idempotent.
    expect((await start(genuine)).status!.pid).toBe(running.status!.pid);
    expect(ticketFor(genuine).gpus).toEqual([0]);
  });
});
