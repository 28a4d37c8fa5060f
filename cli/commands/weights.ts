// `llmgw weights ls | prefetch | rm`: the operator's hands on the hosts' weights caches
// (docs/weights.md). Flags here; the work in cli/actions/weights.ts and weights-prefetch.ts.
import type { Command } from 'commander';
import { jsonOption } from './options.js';

export function register(program: Command): void {
  const weights = program
    .command('weights')
    .description("the model weights each host's cache holds: list them, fetch them ahead of placement, remove them");
  weights
    .command('ls')
    .argument('[node]', 'one node (default: all)')
    .description('what each host holds: model, revision, size, last used, the shards that run it')
    .addOption(jsonOption())
    .action(async (nodeId: string | undefined, opts: { json?: boolean }) => {
      const { weightsLsCommand } = await import('../actions/weights.js');
      await weightsLsCommand(nodeId, opts);
    });
  weights
    .command('prefetch')
    .argument('<model>', 'a catalog model, MODEL or MODEL/PROFILE')
    .description(
      "fetch a model's weights onto hosts without placing anything, with each host's progress (a running deployment's pinned revision, else what the source points at now)",
    )
    .option('--nodes <ids>', 'these hosts, comma-separated')
    .option('--gpu-class <class>', "every Ready host of this GPU class (default: the profile's)")
    .option('--timeout <seconds>', 'give up after this long', '86400')
    .addOption(jsonOption())
    .action(async (model: string, opts: import('../actions/weights-prefetch.js').PrefetchOptions) => {
      const { weightsPrefetchCommand } = await import('../actions/weights-prefetch.js');
      await weightsPrefetchCommand(model, opts);
    });
  weights
    .command('rm')
    .argument('<node>', 'node id')
    .argument('<model>', 'ORG/NAME[@REVISION] as `llmgw weights ls` shows it (every revision when none is named)')
    .description('remove weights from a host; refused, naming the shard, while a shard there runs them')
    .addOption(jsonOption())
    .action(async (nodeId: string, model: string, opts: { json?: boolean }) => {
      const { weightsRmCommand } = await import('../actions/weights.js');
      await weightsRmCommand(nodeId, model, opts);
    });
}
