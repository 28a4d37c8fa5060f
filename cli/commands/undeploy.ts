// `llmgw undeploy NAME`: drain a deployment's replicas and free its GPUs. Flags here; the work
// in cli/actions/scale.ts.
import type { Command } from 'commander';
import { jsonOption } from './options.js';

export function register(program: Command): void {
  program
    .command('undeploy')
    .argument('<name>')
    .description('drain every replica of a deployment, stop its engines and free its GPUs')
    .option('--no-wait', 'return once the drain has begun')
    .addOption(jsonOption())
    .action(async (name: string, opts: { wait: boolean; json?: boolean }) => {
      const { undeployCommand } = await import('../actions/scale.js');
      await undeployCommand(name, opts);
    });
}
