// Replays recorded histories against the current workflow code, so a change that breaks
// determinism fails here and not in production. Pinned types never run old history on new code
// (a run moves to a new build only at continue-as-new), so only the release in progress is
// replayed for them; auto-upgrading types (reconcileNode) also replay every released folder,
// because their running workflows do move to the new code mid-run (docs/upgrades.md).
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';
import { llmgwDataConverter } from '../../temporal/connection.js';
import { loadHistories, releasedVersions, versionInProgress, workflowTypeOf } from '../helpers/histories.js';

const AUTO_UPGRADING_TYPES = ['reconcileNode'];

describe('workflow replay', () => {
  it('replays the release in progress, and auto-upgrading types of every release, against the current code', async () => {
    const current = loadHistories();
    expect(current.length, `test/histories/${versionInProgress()}/ has no histories: npm run record:histories`).toBeGreaterThan(0);
    const released = releasedVersions().flatMap(({ version }) =>
      loadHistories(version).filter((h) => AUTO_UPGRADING_TYPES.includes(workflowTypeOf(h))),
    );
    const failures: string[] = [];
    for await (const result of Worker.runReplayHistories(
      { workflowsPath: join(__dirname, '../workflows/index.ts'), dataConverter: llmgwDataConverter(), replayName: 'llmgw-ci-replay' },
      [...current, ...released].map(({ workflowId, history }) => ({ workflowId, history })),
    )) {
      if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
    }
    expect(failures).toEqual([]);
  });

  it('fails when a workflow changes the commands it issues', async () => {
    const recorded = loadHistories().find((h) => h.name.endsWith('/shardRoundTrip'));
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
