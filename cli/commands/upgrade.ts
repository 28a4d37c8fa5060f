// `llmgw upgrade`: move running workflows to a new control-worker build (docs/upgrades.md).
// Flags here; the work in cli/actions/upgrade.ts.
import type { Command } from 'commander';

export function register(program: Command): void {
  program
    .command('upgrade')
    .description(
      'move running workflows to a new control-worker build: make it Current, then each deployment, replica, node and routes run hands over at its next safe point (docs/upgrades.md)',
    )
    .option('--build-id <id>', 'the build to move to (default: the newest version of the Worker Deployment)')
    .option('--deployment-name <name>', 'the Worker Deployment', process.env.LLMGW_DEPLOYMENT_NAME ?? 'llmgw')
    .option('--timeout <seconds>', 'how long to wait for every run to move', '300')
    .option('--move-stranded', 'also end runs pinned to a build no worker serves; reconciliation adopts their engines (docs/upgrades.md)')
    .action(async (opts: { buildId?: string; deploymentName: string; timeout: string; moveStranded?: boolean }) => {
      const { upgradeCommand } = await import('../actions/upgrade.js');
      await upgradeCommand(opts);
    });
}
