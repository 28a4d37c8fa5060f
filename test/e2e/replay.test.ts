// Replays every recorded history under test/histories/ against the current workflow
// code, so a change that breaks determinism fails here and not in production.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { loadHistories } from '../helpers/histories.js';

describe('workflow replay', () => {
  it('replays every recorded history against the current workflow code', async () => {
    const histories = loadHistories();
    expect(histories.length).toBeGreaterThan(0);
    const failures: string[] = [];
    for await (const result of Worker.runReplayHistories(
      { workflowsPath: join(__dirname, '../workflows/index.ts'), dataConverter: llmgwDataConverter(), replayName: 'llmgw-ci-replay' },
      histories.map(({ workflowId, history }) => ({ workflowId, history })),
    )) {
      if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
    }
    expect(failures).toEqual([]);
  });

  it('fails when a workflow changes the commands it issues', async () => {
    const recorded = loadHistories().find((h) => h.name === 'shardRoundTrip');
    expect(recorded).toBeDefined();
    // The same workflow type, changed to start a timer before its activity.
    const replay = Worker.runReplayHistory(
      {
        workflowsPath: join(__dirname, '../workflows/changed-roundtrip.ts'),
        dataConverter: llmgwDataConverter(),
        replayName: 'llmgw-ci-replay-changed',
      },
      recorded!.history,
    );
    await expect(replay).rejects.toBeInstanceOf(DeterminismViolationError);
  });
});
