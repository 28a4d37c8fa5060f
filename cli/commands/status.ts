// `llmgw status [NAME]`: deployments and their replicas. Flags here; the work in
// cli/actions/status.ts.
import type { Command } from 'commander';
import { jsonOption } from './options.js';

export function register(program: Command): void {
  program
    .command('status')
    .argument('[name]', 'a deployment (default: all)')
    .description('deployments and their replicas: state, nodes, GPUs, endpoint, last reason')
    .addOption(jsonOption())
    .action(async (name: string | undefined, opts: { json?: boolean }) => {
      const { statusCommand } = await import('../actions/status.js');
      await statusCommand(name, opts);
    });
}
