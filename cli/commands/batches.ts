// `llmgw batches [--all] | cancel ID`: the Batch API's batches (docs/batches.md). Flags here; the
// work in cli/actions/batches.ts.
import type { Command } from 'commander';
import { jsonOption } from './options.js';

export function register(program: Command): void {
  const batches = program
    .command('batches')
    .description('batches of the Batch API: status, owner, progress and rate of each (running ones; --all for every one)')
    .option('--all', 'finished batches too')
    .addOption(jsonOption())
    .action(async (opts: { json?: boolean; all?: boolean }) => {
      const { batchesCommand } = await import('../actions/batches.js');
      await batchesCommand(opts);
    });
  batches
    .command('cancel')
    .argument('<id>', 'a batch id (batch_…)')
    .description('cancel a batch: it stops within seconds and keeps what is done in its output file')
    .action(async (id: string) => {
      const { batchesCancelCommand } = await import('../actions/batches.js');
      await batchesCancelCommand(id);
    });
}
