// The router's wakeReplica caller (router/autoscale/wakes.ts) against a real Temporal server: the
// Update reaches the replica's workflow with `by` as given and its answer comes back; a replica
// with no workflow, and one whose worker is down past the deadline (a control worker restarting,
// Temporal unreachable), reject, which the router answers as a failed wake.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { temporalWakeCaller } from '../../router/autoscale/wakes.js';
import { testClient, uniqueId, withWorker } from '../helpers/temporal.js';

let client: Client;
let close: () => Promise<void>;
beforeAll(async () => {
  ({ client, close } = await testClient());
});
afterAll(async () => {
  await close();
});

describe('the wakeReplica Update through Temporal', () => {
  it('reaches the replica workflow with who asked, and brings back its answer', async () => {
    const taskQueue = uniqueId('wake');
    const replicaId = `replica/${uniqueId('sleepy')}/1`;
    const handle = await client.workflow.start('sleepingReplicaStub', { workflowId: replicaId, taskQueue, args: [] });
    const wake = temporalWakeCaller(() => Promise.resolve(client));
    try {
      await withWorker({ taskQueue, workflowsPath: join(__dirname, '../workflows/sleeping-replica.ts') }, async () => {
        expect(await wake(replicaId, { by: 'router:test' })).toEqual({ replicaId, wokeInMs: 7, alreadyAwake: false });
        expect(await handle.query<string[]>('wokenBy')).toEqual(['router:test']);
      });
      // No worker now: the Update waits for one, and is given up at the deadline.
      await expect(temporalWakeCaller(() => Promise.resolve(client), 500)(replicaId, { by: 'router:test' })).rejects.toThrow();
    } finally {
      await handle.terminate('test over');
    }
    await expect(wake(`replica/${uniqueId('none')}/1`, { by: 'router:test' })).rejects.toThrow(/not found/i);
  }, 60_000);
});
