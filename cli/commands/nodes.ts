// `llmgw nodes` and its cordon, uncordon, clear-gpu, enroll and remove: the GPU hosts as the control
// plane sees them. Flags here; the work in cli/actions/nodes.ts.
import type { Command } from 'commander';
import { jsonOption } from './options.js';

export function register(program: Command): void {
  const nodes = program
    .command('nodes')
    .description('the GPU hosts: state, GPUs free/total, problems (and cordon, uncordon, remove)')
    .addOption(jsonOption())
    .action(async (opts: { json?: boolean }) => {
      const { nodesCommand } = await import('../actions/nodes.js');
      await nodesCommand(opts);
    });
  nodes
    .command('cordon')
    .argument('<node>', 'node id')
    .description('place nothing new on the node; what runs there keeps running')
    .option('--reason <text>', 'shown in `llmgw nodes` and the Web UI')
    .action(async (nodeId: string, opts: { reason?: string }) => {
      const { cordonCommand } = await import('../actions/nodes.js');
      await cordonCommand(nodeId, true, opts);
    });
  nodes
    .command('uncordon')
    .argument('<node>', 'node id')
    .description('let placements use the node again')
    .action(async (nodeId: string) => {
      const { cordonCommand } = await import('../actions/nodes.js');
      await cordonCommand(nodeId, false, {});
    });
  nodes
    .command('clear-gpu')
    .argument('<node>', 'node id')
    .argument('<gpu>', 'GPU index')
    .description('return a GPU the agent held out for a fault (Xid, ECC, gone) once it is sound again')
    .action(async (nodeId: string, gpu: string) => {
      const { clearGpuCommand } = await import('../actions/nodes.js');
      await clearGpuCommand(nodeId, gpu);
    });
  nodes
    .command('enroll')
    .argument('<node>', 'node id')
    .argument('<public-key>', "the agent's public key, as it prints it at start or `llmgw agent keygen` does (ed25519-public:…)")
    .description("trust the registrations of the node's agent that this key signs, and only those: placement uses the node once one comes")
    .option(
      '--catalog-key-file <file>',
      'the catalog private key file the enrollment is signed with (default LLMGW_CATALOG_KEY_FILE, as the control worker)',
      process.env.LLMGW_CATALOG_KEY_FILE || undefined,
    )
    .action(async (nodeId: string, publicKey: string, opts: { catalogKeyFile?: string }) => {
      const { enrollCommand } = await import('../actions/nodes-enroll.js');
      await enrollCommand(nodeId, publicKey, opts);
    });
  nodes
    .command('remove')
    .argument('<node>', 'node id')
    .description('forget a host that is gone for good: its node workflow and its reconcile Schedule (its agent must be stopped)')
    .option('--force', 'remove it even though it still holds GPUs for shards')
    .action(async (nodeId: string, opts: { force?: boolean }) => {
      const { removeNodeCommand } = await import('../actions/nodes.js');
      await removeNodeCommand(nodeId, opts);
    });
}
