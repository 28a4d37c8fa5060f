// `llmgw weights ls | prefetch | rm`: the operator's hands on the hosts' weights caches
// (docs/weights.md). Registered by cli/main.ts; each action loads its command module on use.
import type { Command } from 'commander';

export function registerWeightsCommands(program: Command): void {
  const weights = program
    .command('weights')
    .description("the model weights each host's cache holds: list them, fetch them ahead of placement, remove them");
  weights
    .command('ls')
    .argument('[node]', 'one node (default: all)')
    .description('what each host holds: model, revision, size, last used, the shards that run it')
    .option('--json', 'machine-readable output')
    .action(async (nodeId: string | undefined, opts: { json?: boolean }) => {
      const { weightsLsCommand } = await import('./commands/weights.js');
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
    .option('--json', 'machine-readable output')
    .action(async (model: string, opts: import('./commands/weights-prefetch.js').PrefetchOptions) => {
      const { weightsPrefetchCommand } = await import('./commands/weights-prefetch.js');
      await weightsPrefetchCommand(model, opts);
    });
  weights
    .command('rm')
    .argument('<node>', 'node id')
    .argument('<model>', 'ORG/NAME[@REVISION] as `llmgw weights ls` shows it (every revision when none is named)')
    .description('remove weights from a host; refused, naming the shard, while a shard there runs them')
    .option('--json', 'machine-readable output')
    .action(async (nodeId: string, model: string, opts: { json?: boolean }) => {
      const { weightsRmCommand } = await import('./commands/weights.js');
      await weightsRmCommand(nodeId, model, opts);
    });
}
