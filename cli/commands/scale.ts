// `llmgw scale NAME [REPLICAS]`: how many replicas a deployment runs, or the bounds of an
// autoscaled one. Flags here; the work in cli/actions/scale.ts.
import type { Command } from 'commander';
import type { ScaleOptions } from '../actions/scale.js';
import { jsonOption } from './options.js';

export function register(program: Command): void {
  program
    .command('scale')
    .argument('<name>')
    .argument('[replicas]')
    .description('set the number of replicas of a deployment, or the bounds of an autoscaled one (--min/--max)')
    .option('--min <n>', 'autoscaling: the fewest replicas (0 lets it go Idle)')
    .option('--max <n>', 'autoscaling: the most replicas')
    .option('--idle-to-zero <seconds>', 'autoscaling with --min 0: go Idle after this long with no request')
    .option('--no-autoscale', 'turn autoscaling off, keeping the current count')
    .addOption(jsonOption())
    .action(async (name: string, replicas: string | undefined, opts: ScaleOptions) => {
      const { scaleCommand } = await import('../actions/scale.js');
      await scaleCommand(name, replicas, opts);
    });
}
