// `llmgw temporal …`: what llmgw runs on — the pinned Temporal CLI, its dev server, Temporal on
// PostgreSQL, and llmgw's search attributes on an existing cluster.
import type { Command } from 'commander';
import { temporalListenOptions, withOptions } from './options.js';

export function register(program: Command): void {
  const temporal = program.command('temporal').description('the pinned Temporal CLI, its dev server, and Temporal on PostgreSQL');
  temporal
    .command('install')
    .description('make the pinned Temporal CLI available (build it with Go into the cache if needed) and print its path')
    .action(async () => {
      const { ensureTemporalCli } = await import('../../temporal/cli-binary.js');
      console.log(await ensureTemporalCli());
    });
  const startDev = temporal
    .command('start-dev')
    .description(
      'run `temporal server start-dev` with llmgw search attributes; returns once the frontend answers, then stays up until Ctrl-C',
    );
  withOptions(startDev, temporalListenOptions())
    .option('--ui-port <port>', 'Web UI port', '8233')
    .option('--db-file <file>', 'SQLite file for the server state (default .llmgw/temporal/dev.db)')
    .option('--in-memory', 'keep nothing after the server stops')
    .option('--headless', 'no Web UI')
    .action(async (opts: { port: string; uiPort: string; ip: string; dbFile?: string; inMemory?: boolean; headless?: boolean }) => {
      const { runDevServerCommand } = await import('../actions/dev-server.js');
      await runDevServerCommand(opts);
    });
  temporal
    .command('install-server')
    .description(
      'make the pinned Temporal server and SQL tool available (build them with Go into the cache if needed) and print their paths',
    )
    .action(async () => {
      const { ensureTemporalServer } = await import('../../temporal/postgres/server-binary.js');
      const binaries = await ensureTemporalServer();
      console.log(Object.values(binaries).join('\n'));
    });
  const startPostgres = temporal
    .command('start-postgres')
    .description(
      'run the pinned Temporal server on PostgreSQL (LLMGW_POSTGRES_URL, or a private cluster under .llmgw/postgres) with llmgw search attributes; returns once it accepts workflows',
    );
  withOptions(startPostgres, temporalListenOptions())
    .option('--namespace <ns>', 'namespace to create', 'default')
    .option('--history-shards <n>', 'history shards, fixed when the databases are first set up (default 4)')
    .option('--state-dir <dir>', 'where the private cluster, config and log live (default .llmgw)')
    .option('--detach', 'leave it running and return (stop it with `llmgw temporal stop-postgres`)')
    .option(
      '--dynamic-config-value <key=value>',
      'a dynamic config value over the server defaults (repeatable), e.g. frontend.namespaceRPS.visibility=100',
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
    )
    .action(async (opts: import('../../temporal/postgres/command.js').StartPostgresFlags) => {
      const { startPostgresCommand } = await import('../../temporal/postgres/command.js');
      await startPostgresCommand(opts);
    });
  temporal
    .command('stop-postgres')
    .description('stop what `start-postgres` left running: the server and the private PostgreSQL')
    .option('--purge', "also delete its data: the private cluster's files, or the databases llmgw created on LLMGW_POSTGRES_URL")
    .option('--state-dir <dir>', 'as given to start-postgres (default .llmgw)')
    .action(async (opts: { purge?: boolean; stateDir?: string }) => {
      const { stopPostgresCommand } = await import('../../temporal/postgres/command.js');
      await stopPostgresCommand(opts);
    });
  temporal
    .command('register-search-attributes')
    .description("create llmgw's search attributes on an existing cluster (uses the Temporal CLI's standard connection settings)")
    .allowUnknownOption()
    .argument('[temporalArgs...]', 'extra arguments passed to `temporal operator search-attribute` (e.g. --address, --namespace)')
    .action(async (temporalArgs: string[]) => {
      const { ensureTemporalCli } = await import('../../temporal/cli-binary.js');
      const { registerSearchAttributes } = await import('../../temporal/search-attributes.js');
      const created = await registerSearchAttributes(await ensureTemporalCli(), temporalArgs);
      console.log(created.length ? `created: ${created.join(', ')}` : 'all llmgw search attributes already exist');
    });
}
