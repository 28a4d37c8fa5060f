// `llmgw sleep NAME [--level 1|2]` and `llmgw wake NAME`: put a deployment's replicas to sleep,
// or wake them, each through its replica's Update (docs/sleep.md, "Operators"). Flags here; the
// work in cli/actions/sleep.ts.
import { Option, type Command } from 'commander';
import { jsonOption } from './options.js';

export function register(program: Command): void {
  program
    .command('sleep')
    .argument('<name>', 'a deployment')
    .description("put a deployment's Ready replicas to sleep: they keep their hosts and wake on the next request")
    .addOption(
      new Option('--level <level>', "1 moves the weights to host RAM, 2 frees them too (default: the profile's)").choices(['1', '2']),
    )
    .option('--force', 'sleep even a replica woken less than its minAwakeSeconds ago')
    .addOption(jsonOption())
    .action(async (name: string, opts: { level?: '1' | '2'; force?: boolean; json?: boolean }) => {
      const { sleepCommand } = await import('../actions/sleep.js');
      await sleepCommand(name, opts);
    });
  program
    .command('wake')
    .argument('<name>', 'a deployment')
    .description("wake a deployment's sleeping replicas and say how long each took")
    .addOption(jsonOption())
    .action(async (name: string, opts: { json?: boolean }) => {
      const { wakeCommand } = await import('../actions/sleep.js');
      await wakeCommand(name, opts);
    });
}
