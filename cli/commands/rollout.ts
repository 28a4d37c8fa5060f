// `llmgw rollout NAME`: move a deployment to another revision, or undo, pause, resume one.
// Flags here; the work in cli/actions/rollout.ts.
import type { Command } from 'commander';
import type { RolloutOptions } from '../actions/rollout.js';
import { jsonOption, rolloutPaceOptions, waitTimeoutOption, withOptions } from './options.js';

export function register(program: Command): void {
  const rollout = program
    .command('rollout')
    .argument('<name>', 'a deployment')
    .description(
      'move a deployment to another revision: surge when there is room, drain-first when not, counted once routers route to it, rolled back on failure',
    )
    .option('--profile <profile>', "the profile to roll to (default: the catalog's current revision of the profile it runs)");
  withOptions(rollout, rolloutPaceOptions())
    .option('--undo', 'roll back: abandon the rollout in progress, or return to the revision before the last one')
    .option('--pause', 'hold the rollout where it is')
    .option('--resume', 'go on with a paused rollout')
    .option(
      '--refresh-source',
      "move the weights to what the source's ref (a branch, or the default one) points at now; without it the pinned commit is kept",
    )
    .option('--no-prefetch', 'drain without first fetching the new weights onto the hosts (its replicas fetch as they start)')
    .option('--wait', 'print each step and exit 0 when it completes, non-zero when it rolls back or fails')
    .addOption(waitTimeoutOption(1800))
    .addOption(jsonOption())
    .action(async (name: string, opts: RolloutOptions) => {
      const { rolloutCommand } = await import('../actions/rollout.js');
      await rolloutCommand(name, opts);
    });
}
