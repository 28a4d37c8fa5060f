// The `llmgw` command line: operator commands (deploy, scale, status, …) and the
// long-running processes (worker, agent, router, fake-engine, up). Each command's
// module is loaded only when it runs, so `llmgw fake-engine` starts fast.
import { Command, Option } from 'commander';

const program = new Command();
program
  .name('llmgw')
  .description('Run LLM inference engines as Temporal-managed replicas on GPU hosts, behind one OpenAI-compatible endpoint.')
  .showHelpAfterError()
  .enablePositionalOptions();

const temporal = program.command('temporal').description('the pinned Temporal CLI and its dev server');
temporal
  .command('install')
  .description('make the pinned Temporal CLI available (build it with Go into the cache if needed) and print its path')
  .action(async () => {
    const { ensureTemporalCli } = await import('../temporal/cli-binary.js');
    console.log(await ensureTemporalCli());
  });
temporal
  .command('start-dev')
  .description('run `temporal server start-dev` with llmgw search attributes; returns once the frontend answers, then stays up until Ctrl-C')
  .option('--port <port>', 'frontend port', '7233')
  .option('--ui-port <port>', 'Web UI port', '8233')
  .option('--ip <ip>', 'address to listen on', '127.0.0.1')
  .option('--db-file <file>', 'SQLite file for the server state (default .llmgw/temporal/dev.db)')
  .option('--in-memory', 'keep nothing after the server stops')
  .option('--headless', 'no Web UI')
  .action(async (opts: { port: string; uiPort: string; ip: string; dbFile?: string; inMemory?: boolean; headless?: boolean }) => {
    const { runDevServerCommand } = await import('./commands/dev-server.js');
    await runDevServerCommand(opts);
  });
temporal
  .command('register-search-attributes')
  .description("create llmgw's search attributes on an existing cluster (uses the Temporal CLI's standard connection settings)")
  .allowUnknownOption()
  .argument('[temporalArgs...]', 'extra arguments passed to `temporal operator search-attribute` (e.g. --address, --namespace)')
  .action(async (temporalArgs: string[]) => {
    const { ensureTemporalCli } = await import('../temporal/cli-binary.js');
    const { registerSearchAttributes } = await import('../temporal/search-attributes.js');
    const created = await registerSearchAttributes(await ensureTemporalCli(), temporalArgs);
    console.log(created.length ? `created: ${created.join(', ')}` : 'all llmgw search attributes already exist');
  });

const catalog = program.command('catalog').description('the catalog of models and engine profiles');
catalog
  .command('validate')
  .argument('<file>', 'catalog YAML file')
  .description('check a catalog file; prints every error with its path and line, exits 1 when there is one')
  .action(async (file: string) => {
    const { validateCatalogCommand } = await import('../catalog/validate-command.js');
    const result = validateCatalogCommand(file);
    (result.exitCode === 0 ? console.log : console.error)(result.output);
    process.exitCode = result.exitCode;
  });

program
  .command('fake-engine')
  .description('run the fake inference engine (vLLM surface, for demos, tests and benchmarks)')
  .helpOption(false)
  .allowUnknownOption()
  .allowExcessArguments()
  .passThroughOptions()
  .argument('[args...]')
  .action(async (args: string[]) => {
    const { runFakeEngine } = await import('../fake-engine/main.js');
    await runFakeEngine(args);
  });

program
  .command('agent')
  .description('run the agent of one GPU host (or a simulated one): discovery, engine supervisor, node-local task queue agent/<nodeId>')
  .option('--node-id <id>', 'this host\'s node id (default: hostname)')
  .option('--state-dir <dir>', 'where shard specs and logs live (default .llmgw/agents/<nodeId>)')
  .option('--gpus <real|FILE>', 'real: nvidia-smi and sysfs; FILE: a simulated inventory (YAML/JSON, or builtin:h100x8, builtin:a100x8, builtin:l40sx4)', 'real')
  .option('--sysfs-root <dir>', 'root of the sysfs tree to read', '/')
  .option('--advertise-addr <ip>', 'the address engines are reached at', '127.0.0.1')
  .option('--admin-addr <host:port>', 'admin gRPC API (Describe, TailLogs, health)', '127.0.0.1:7401')
  .option('--labels <k=v,...>', 'node labels (fabric=ib-a, pool=...)')
  .option('--managed-gpus <list>', 'GPU indices this agent may hand out, e.g. 0,1,2,3 (default: all)')
  .option('--port-range <from-to>', 'engine HTTP ports', '18000-18999')
  .option('--presence-heartbeat-seconds <s>', 'heartbeat timeout of the presence activity', '10')
  .option('--lost-grace-seconds <s>', 'NotReady for this long → Lost (GPUs released, replicas re-placed)', '60')
  .action(async (opts: Record<string, unknown>) => {
    const { runAgent } = await import('../agent/main.js');
    await runAgent(opts);
  });

program
  .command('worker')
  .description('run the control worker (task queue llmgw): the workflows and the control activities')
  .option('--catalog <file>', 'catalog YAML (or LLMGW_CATALOG); edits are picked up without a restart', process.env.LLMGW_CATALOG ?? 'examples/catalog.yaml')
  .action(async (opts: { catalog: string }) => {
    const { runControlWorker } = await import('../workers/control-worker.js');
    await runControlWorker({ catalogFile: opts.catalog });
  });

program
  .command('nodes')
  .description('the GPU hosts: state, GPUs free/total, problems')
  .option('--json', 'machine-readable output')
  .action(async (opts: { json?: boolean }) => {
    const { nodesCommand } = await import('./commands/nodes.js');
    await nodesCommand(opts);
  });

program.addOption(new Option('--json', 'machine-readable output where supported').hideHelp());

export async function main(argv: string[]): Promise<void> {
  try {
    await program.parseAsync(argv);
  } catch (error) {
    console.error(`llmgw: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  }
}

void main(process.argv);
