// Placements at the same moment in one worker ask a node once, and see each other's reserves
// in flight; a failed query answers undefined and is asked again next time.
import { describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { placementsInFlight } from '../../activities/placement-inflight.js';

function fakeClient(fail = false): { client: Client; asked: string[] } {
  const asked: string[] = [];
  const client = {
    workflow: {
      getHandle: (workflowId: string) => ({
        query: async () => {
          asked.push(workflowId);
          await new Promise((r) => setTimeout(r, 20));
          if (fail) throw new Error('no poller');
          return { nodeId: workflowId.replace('node/', ''), freeGpus: [0, 1] };
        },
      }),
    },
  } as unknown as Client;
  return { client, asked };
}

describe('placementsInFlight', () => {
  it('joins a query in flight for a node and asks again once it answered', async () => {
    const { client, asked } = fakeClient();
    const inFlight = placementsInFlight(client);
    const views = await Promise.all([inFlight.describe('a'), inFlight.describe('a'), inFlight.describe('b')]);
    expect(asked).toEqual(['node/a', 'node/b']);
    expect(views.map((v) => v?.nodeId)).toEqual(['a', 'a', 'b']);
    await inFlight.describe('a');
    expect(asked).toEqual(['node/a', 'node/b', 'node/a']);
  });

  it('answers undefined for a node that cannot be asked', async () => {
    const { client } = fakeClient(true);
    expect(await placementsInFlight(client).describe('a')).toBeUndefined();
  });

  it('counts GPUs being reserved on a node until each reserve settles, failed or not', async () => {
    const inFlight = placementsInFlight(fakeClient().client);
    let finish: (() => void) | undefined;
    const first = inFlight.reserve('a', 2, () => new Promise<void>((r) => (finish = r)));
    const second = inFlight.reserve('a', 4, () => Promise.reject(new Error('rejected')));
    expect(inFlight.reserving('a')).toBe(6);
    await expect(second).rejects.toThrow('rejected');
    expect(inFlight.reserving('a')).toBe(2);
    finish!();
    await first;
    expect(inFlight.reserving('a')).toBe(0);
    expect(inFlight.reserving('b')).toBe(0);
  });
});
