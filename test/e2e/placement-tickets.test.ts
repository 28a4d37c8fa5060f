// Signed placements, end to end (issue 26, point 3; issue 37): a namespace member with a worker
// of its own sends startShard to a real agent's `agent/<node>` queue with a validly signed
// revision but a placement of its choosing, a ticket for another host, a stale ticket, or a
// genuine ticket replayed by a new workflow under a replica id whose run has ended. The agent
// refuses each, naming why, and starts nothing.
import { beforeAll, describe, expect, it } from 'vitest';
import { WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure, ApplicationFailure } from '@temporalio/common';
import { clone, create } from '@bufbuild/protobuf';
import {
  StartShardSchema,
  StopShardSchema,
  WaitHealthySchema,
  type RunningShard,
  type StartShard,
} from '../../proto/gen/llmgw/v1/shard_pb.js';
import { uniqueId } from '../helpers/temporal.js';
import { useCallWorker } from '../helpers/call-worker.js';
import { randomPortRange, startTcpAgent } from '../helpers/fleet.js';
import { enginesOf } from '../helpers/processes.js';
import { fakeShardSpec } from '../helpers/shards.js';
import { bindTicket, placeWithTestKey, ticketFor, ticketOf } from '../helpers/catalog-key.js';

const nodeId = uniqueId('tickets');
const attacker = useCallWorker('attacker', [nodeId]);

/** startShard on the agent's queue from a workflow of the attacker's worker, under `workflowId`. */
function start(spec: StartShard, workflowId = spec.replicaId): Promise<RunningShard> {
  return attacker.call<RunningShard>(nodeId, 'startShard', spec, workflowId);
}

async function refusal(spec: StartShard, workflowId?: string): Promise<ApplicationFailure> {
  const failure = await start(spec, workflowId).catch((error: unknown) => error);
  expect(failure).toBeInstanceOf(WorkflowFailedError);
  const cause = ((failure as WorkflowFailedError).cause as ActivityFailure).cause as ApplicationFailure;
  expect(cause).toBeInstanceOf(ApplicationFailure);
  return cause;
}

/**
 * startShard from a new run of `workflowId` (a new run chain), carrying `spec` as given, or, with
 * `bind`, with its ticket signed for that chain as placement would; returns the run's chain too.
 */
async function startAs(spec: StartShard, workflowId: string, bind: boolean): Promise<{ chain: string; result: Promise<RunningShard> }> {
  const handle = await attacker
    .client()
    .workflow.start('agentCallBound', { taskQueue: attacker.queue, workflowId, args: [nodeId, 'startShard'] });
  const sent = bind ? bindTicket(spec, handle.firstExecutionRunId) : spec;
  await handle.signal('agentCallArg', sent);
  return { chain: handle.firstExecutionRunId, result: handle.result() as Promise<RunningShard> };
}

/** A spec as the genuine one, with its genuine ticket, then changed by the attacker. */
function tampered(genuine: StartShard, change: (s: StartShard) => void): StartShard {
  const copy = clone(StartShardSchema, genuine);
  change(copy);
  return copy;
}

beforeAll(async () => {
  await startTcpAgent(nodeId, {
    gpus: 'builtin:h100x8',
    env: {},
    range: randomPortRange(20),
    extra: ['--managed-gpus', '0,1,2,3', '--reconcile', 'dry-run'],
  });
});

describe('signed placements', () => {
  it('refuses starts whose leader, GPUs or port the control worker did not place, naming why, and starts no process', async () => {
    // The genuine shard: placed by the control worker on GPU 0, sent by its replica's workflow.
    const genuine = fakeShardSpec({ nodeId, deployment: 'ticket-genuine', gpus: [0], args: ['--load-time', '0'] });
    const running = await start(genuine);
    await attacker.call(
      nodeId,
      'waitHealthy',
      create(WaitHealthySchema, { shardId: genuine.shardId, timeoutSeconds: 30 }),
      uniqueId('wait'),
    );
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
      // Issue 37: a ticket names the agent's own address, and a new engine needs a fresh one.
      [
        'a ticket for another address',
        (() => {
          const spec = fakeShardSpec({ nodeId, deployment: 'ticket-address', gpus: [2] });
          return placeWithTestKey(spec, { ...ticketFor(spec), address: '198.18.0.99' });
        })(),
        undefined,
        /its ticket places it at address "198\.18\.0\.99", but this agent's address is 127\.0\.0\.1/,
      ],
      [
        'a ticket issued 10 minutes ago',
        (() => {
          const spec = fakeShardSpec({ nodeId, deployment: 'ticket-stale', gpus: [2] });
          return placeWithTestKey(spec, { ...ticketFor(spec), issuedAt: Date.now() - 10 * 60_000 });
        })(),
        undefined,
        /its ticket was issued 10 min ago: a new engine starts only on a ticket of the last 5 min/,
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

  it('refuses a genuine ticket replayed by a new workflow under the id of a replica whose run has ended', async () => {
    const spec = fakeShardSpec({ nodeId, deployment: 'ticket-replay', gpus: [3], args: ['--load-time', '0'] });
    // The genuine replica: its run chain starts the engine, then stops it and ends.
    const genuine = await attacker.session(nodeId, spec.replicaId);
    const running = await genuine.call<RunningShard>('startShard', spec);
    expect(running.status!.pid).toBeGreaterThan(0);
    await genuine.call(
      'stopShard',
      create(StopShardSchema, { shardId: spec.shardId, replicaId: spec.replicaId, graceSeconds: 1, reason: 'replica ended' }),
    );
    await genuine.end();
    await expect.poll(() => enginesOf([nodeId]).some((e) => e.pid === running.status!.pid), { timeout: 15_000 }).toBe(false);
    const replayed = bindTicket(spec, genuine.chain);

    // The id is free again: a workflow started by hand under it sends the old ticket.
    const before = enginesOf([nodeId]).map((e) => e.pid);
    const replay = await startAs(replayed, spec.replicaId, false);
    const failure = await replay.result.catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(WorkflowFailedError);
    const cause = ((failure as WorkflowFailedError).cause as ActivityFailure).cause as ApplicationFailure;
    expect(cause.type).toBe('PlacementRefused');
    expect(cause.message).toMatch(
      new RegExp(`sent by run chain ${replay.chain} of replica/ticket-replay/1, but its ticket is chain ${genuine.chain}'s`),
    );
    expect(enginesOf([nodeId]).map((e) => e.pid)).toEqual(before);
    // It was the genuine ticket of the genuine chain, signed by the control worker.
    expect(ticketOf(replayed)?.chain).toBe(genuine.chain);
  });
});
