// A worker of the test's own, on a queue of its own, running the test workflows (agentCall, the
// fake replicas: test/workflows/), beside a real control worker: how e2e files call an agent's
// activities as a workflow would. Registers the file's setup and teardown, which also ends every
// llmgw process the file started and the engines of its node ids.
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Client } from '@temporalio/client';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { killEnginesOf, spawnControlWorker, stopAll } from './processes.js';
import { temporalAddress, testClient, uniqueId } from './temporal.js';
import { bindTicket } from './catalog-key.js';
import type { StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';

export interface CallWorker {
  /** The queue the test workflows run on. */
  queue: string;
  client(): Client;
  /** Runs `activity` on the agent of `nodeId` from a workflow with this id (agentCall). */
  call<T>(nodeId: string, activity: string, arg: unknown, workflowId: string): Promise<T>;
  /**
   * A run that makes every call itself, as a replica's run chain does (agentSession): what it
   * starts, it may stop. A start's ticket is bound to its chain.
   */
  session(nodeId: string, workflowId: string): Promise<AgentSession>;
}

export interface AgentSession {
  chain: string;
  call<T>(activity: string, arg: unknown): Promise<T>;
  end(): Promise<void>;
}

export function useCallWorker(label: string, nodeIds: string[] | (() => string[])): CallWorker {
  const queue = uniqueId(label);
  let client: Client | undefined;
  let closeClient: (() => Promise<void>) | undefined;
  let connection: NativeConnection | undefined;
  let worker: Worker | undefined;
  let running: Promise<void> | undefined;
  beforeAll(async () => {
    ({ client, close: closeClient } = await testClient());
    const controlWorker = spawnControlWorker();
    connection = await NativeConnection.connect({ address: temporalAddress() });
    worker = await Worker.create({
      connection,
      taskQueue: queue,
      workflowsPath: join(__dirname, '../workflows/index.ts'),
      dataConverter: llmgwDataConverter(),
    });
    running = worker.run();
    await controlWorker;
  });
  afterAll(async () => {
    worker?.shutdown();
    await running?.catch(() => undefined);
    await stopAll();
    await killEnginesOf(typeof nodeIds === 'function' ? nodeIds() : nodeIds);
    await connection?.close();
    await closeClient?.();
  });
  const self: CallWorker = {
    queue,
    client: () => client!,
    call: async <T>(nodeId: string, activity: string, arg: unknown, workflowId: string): Promise<T> => {
      if (activity !== 'startShard') {
        return (await self.client().workflow.execute('agentCall', { taskQueue: queue, workflowId, args: [nodeId, activity, arg] })) as T;
      }
      // A start's ticket names the run chain that sends it: started first, then given its start.
      const handle = await self.client().workflow.start('agentCallBound', { taskQueue: queue, workflowId, args: [nodeId, activity] });
      await handle.signal('agentCallArg', bindTicket(arg as StartShard, handle.firstExecutionRunId));
      return (await handle.result()) as T;
    },
    session: async (nodeId: string, workflowId: string): Promise<AgentSession> => {
      const handle = await self.client().workflow.start('agentSession', { taskQueue: queue, workflowId, args: [nodeId] });
      const chain = handle.firstExecutionRunId;
      return {
        chain,
        call: async <T>(activity: string, arg: unknown): Promise<T> =>
          (await handle.executeUpdate('agentSessionCall', {
            args: [activity, activity === 'startShard' ? bindTicket(arg as StartShard, chain) : arg],
          })) as T,
        end: async () => {
          await handle.signal('agentSessionEnd');
          await handle.result();
        },
      };
    },
  };
  return self;
}
