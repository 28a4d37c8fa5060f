// untilRouted (activities/routes.ts), the wait behind rollouts and `deploy --wait`: it asks the
// routes workflow again when a run ends under its Update, and stops only for a missing workflow
// or a malformed request. Driven with a handle whose Update answers from a script.
import { describe, expect, it } from 'vitest';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { untilRouted } from '../../activities/routes.js';
import type { AwaitRoutedResult } from '../../workflows/routes/definitions.js';

type Answer = AwaitRoutedResult | Error;

function scriptedHandle(answers: Answer[]): { handle: WorkflowHandle; calls: () => number } {
  let calls = 0;
  const handle = {
    executeUpdate: async () => {
      const answer = answers[Math.min(calls++, answers.length - 1)]!;
      if (answer instanceof Error) throw answer;
      return answer;
    },
  } as unknown as WorkflowHandle;
  return { handle, calls: () => calls };
}

const routed: AwaitRoutedResult = { routed: true, routers: 2, version: 7 };
const noPause = async (): Promise<void> => undefined;
const failed = (message: string) => new WorkflowUpdateFailedError('Workflow Update failed', ApplicationFailure.create({ message }));

describe('untilRouted', () => {
  it('asks again when the run that accepted the Update ended under it, and says why once per retry', async () => {
    const retries: string[] = [];
    const { handle, calls } = scriptedHandle([
      failed('Workflow Update failed because the Workflow completed before the Update completed.'),
      failed('continuing as new; call again'),
      { routed: false, routers: 2, version: 6 },
      routed,
    ]);
    await expect(untilRouted(handle, 'replica/a/1', true, noPause, (r) => retries.push(r))).resolves.toEqual(routed);
    expect(calls()).toBe(4);
    // The expected refusal between runs is not worth a line; the unexpected one is.
    expect(retries).toEqual(['Workflow Update failed: Workflow Update failed because the Workflow completed before the Update completed.']);
  });

  it('stops for a missing routes workflow and for a malformed request', async () => {
    const missing = scriptedHandle([new WorkflowNotFoundError('not found', 'routes', undefined)]);
    await expect(untilRouted(missing.handle, 'replica/a/1', true, noPause)).rejects.toBeInstanceOf(WorkflowNotFoundError);
    const malformed = scriptedHandle([failed('awaitRouted needs a replicaId'), routed]);
    await expect(untilRouted(malformed.handle, '', true, noPause)).rejects.toThrow(/Workflow Update failed/);
    expect(malformed.calls()).toBe(1);
  });
});
