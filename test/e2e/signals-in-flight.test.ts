// What workflows/signals-in-flight.ts is for, on the pinned Temporal server: a signal a run sends
// to another workflow without waiting is lost when the run continues as new in the same task (the
// server finds the sender closed when it comes to send it), and arrives when the run waits for it
// first. The node lost its "back to Ready" tell to its replicas this way under load.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { testClient, uniqueId, withWorker } from '../helpers/temporal.js';
import { eventually, sleep } from '../helpers/processes.js';
import { pingsQuery, type SenderInput } from '../workflows/signal-then-hand-over.js';

const taskQueue = uniqueId('signals-in-flight');

async function pingsAfterHandOver(waitForSent: boolean): Promise<number> {
  const { client, close } = await testClient();
  try {
    const target = uniqueId('count-pings');
    const counter = await client.workflow.start('countPings', { taskQueue, workflowId: target });
    try {
      const input: SenderInput = { target, waitForSent };
      await client.workflow.execute('signalThenHandOver', { taskQueue, workflowId: uniqueId('sender'), args: [input] });
      // The server sends it after the task that asked for it; give it time to arrive.
      if (waitForSent)
        await eventually('the ping delivered', async () => ((await counter.query(pingsQuery)) > 0 ? true : undefined), 10_000);
      else await sleep(2_000);
      return await counter.query(pingsQuery);
    } finally {
      await counter.terminate('test over').catch(() => undefined);
    }
  } finally {
    await close();
  }
}

describe('signals sent just before a hand-over', () => {
  it('are lost unless the run waits for them to go out', async () => {
    const counts = await withWorker({ taskQueue, workflowsPath: join(__dirname, '../workflows/signal-then-hand-over.ts') }, async () => ({
      unwaited: await pingsAfterHandOver(false),
      waited: await pingsAfterHandOver(true),
    }));
    expect(counts).toEqual({ unwaited: 0, waited: 1 });
  }, 60_000);
});
