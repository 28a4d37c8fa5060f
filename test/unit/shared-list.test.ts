// A visibility list asked by many placements at once is asked of the server once, and its
// answer reused for a moment; a failed list is not remembered.
import { describe, expect, it } from 'vitest';
import type { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { listShared } from '../../activities/shared-list.js';

function fakeClient(rows: string[], fail = false): { client: Client; calls: () => number } {
  let calls = 0;
  const client = {
    workflow: {
      list: () => {
        calls++;
        return (async function* () {
          await new Promise((r) => setTimeout(r, 20));
          if (fail) throw new Error('visibility down');
          for (const workflowId of rows) yield { workflowId } as WorkflowExecutionInfo;
        })();
      },
    },
  } as unknown as Client;
  return { client, calls: () => calls };
}

describe('listShared', () => {
  it('joins a list in flight and reuses a finished one for a moment, then asks again', async () => {
    let now = 1_000;
    const { client, calls } = fakeClient(['node/a', 'node/b']);
    const answers = await Promise.all(Array.from({ length: 50 }, () => listShared(client, 'q', () => now)));
    expect(calls()).toBe(1);
    expect(answers.every((rows) => rows.map((r) => r.workflowId).join() === 'node/a,node/b')).toBe(true);
    now += 500;
    await listShared(client, 'q', () => now);
    expect(calls()).toBe(1);
    await listShared(client, 'other', () => now);
    expect(calls()).toBe(2);
    now += 1_000;
    await listShared(client, 'q', () => now);
    expect(calls()).toBe(3);
  });

  it('forgets a list that failed, so the next caller asks again', async () => {
    const broken = fakeClient([], true);
    await expect(listShared(broken.client, 'q')).rejects.toThrow(/visibility down/);
    await expect(listShared(broken.client, 'q')).rejects.toThrow(/visibility down/);
    expect(broken.calls()).toBe(2);
  });
});
