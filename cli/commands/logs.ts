// `llmgw logs REPLICA`: a replica's engine log, read through its agent's admin API. Flags here;
// the work in cli/actions/logs.ts.
import type { Command } from 'commander';

export function register(program: Command): void {
  program
    .command('logs')
    .argument('<replica>', 'replica id: replica/NAME/SEQ or NAME/SEQ')
    .description("a replica's engine log, through its agent's admin API")
    .option('--rank <n>', 'which rank', '0')
    .option('-n, --lines <n>', 'how many lines first', '100')
    .option('-f, --follow', 'keep printing new lines')
    .option(
      '--admin-token-file <file>',
      'for an agent whose admin API is on TCP: its <state dir>/admin.token (or LLMGW_ADMIN_TOKEN_FILE; default .llmgw/agents/<node>/admin.token when it exists)',
    )
    .action(async (replica: string, opts: { lines: string; follow?: boolean; rank: string; adminTokenFile?: string }) => {
      const { logsCommand } = await import('../actions/logs.js');
      await logsCommand(replica, opts);
    });
}
