// `llmgw reconcile [NODE…]`: reconcile now and print every action. Flags here; the work in
// cli/actions/reconcile.ts.
import type { Command } from 'commander';
import { jsonOption } from './options.js';

export function register(program: Command): void {
  program
    .command('reconcile')
    .description('match what agents run against the catalog and the workflows now, and print every action (all nodes when none is named)')
    .argument('[nodes...]', 'node ids')
    .addOption(jsonOption())
    .action(async (nodes: string[], opts: { json?: boolean }) => {
      const { reconcileCommand } = await import('../actions/reconcile.js');
      await reconcileCommand(nodes, opts);
    });
}
