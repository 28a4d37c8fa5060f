// A Temporal client and an activity context for unit tests of the control worker's signing
// activities: every workflow is a running replica/demo/1 of one run chain, Ready at
// 198.18.0.7:8000 (its node holding the shard), and deployment/demo runs it.
import { asyncLocalStorage, type Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';

/**
 * A client for which every workflow is a running replica of run chain `chain`, Ready at
 * 198.18.0.7:8000 with `shards`, and every node holds the shard (all one query answer).
 * `deploymentQuery` answers deployment/demo's status query (a running, Ready deployment by default).
 */
export function fakeReplicaClient(chain: string, shards: unknown[] = [], deploymentQuery?: () => Promise<unknown>): Client {
  const handle = {
    describe: () =>
      Promise.resolve({
        status: { name: 'RUNNING' },
        type: 'replica',
        taskQueue: 'llmgw',
        runId: chain,
        memo: { route: { servedName: 'demo' } },
        raw: { workflowExecutionInfo: { firstRunId: chain } },
      }),
    query: () =>
      Promise.resolve({
        phase: 'Ready',
        endpoint: 'http://198.18.0.7:8000',
        shards,
        allocations: [{ shardId: 'demo.1.r0.a1', replicaId: 'replica/demo/1' }],
        inventory: { managementAddress: '198.18.0.7' },
      }),
  };
  // The replica's deployment: running, as revocation asks before a renewal or a route.
  const deployment = {
    describe: () => Promise.resolve({ status: { name: 'RUNNING' }, type: 'deployModel', taskQueue: 'llmgw' }),
    query: deploymentQuery ?? (() => Promise.resolve({ name: 'demo', phase: 'Ready', model: 'demo', profile: 'p', revision: '' })),
  };
  return {
    workflow: { getHandle: (id: string) => (id.startsWith('deployment/') ? deployment : handle) },
  } as unknown as Client;
}

/** Runs `fn` as attempt `attempt` of an activity called by `replica/demo/1`, run `runId`. */
export function asActivityOf<T>(runId: string, fn: () => Promise<T>, attempt = 1): Promise<T> {
  const context = {
    info: { workflowExecution: { workflowId: 'replica/demo/1', runId }, taskQueue: 'llmgw', attempt },
  } as unknown as Context;
  return asyncLocalStorage.run(context, fn);
}
