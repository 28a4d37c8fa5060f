// The `llmgw` command line: operator commands (deploy, scale, status, …) and the
// long-running processes (worker, agent, router, fake-engine, up). Each command's
// module is loaded only when it runs, so `llmgw fake-engine` starts fast.
import { Command, Option } from 'commander';
import { DEFAULT_PORTS } from '../common/names.js';
import { addRouterCommand } from '../router/command.js';

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
  .description(
    'run `temporal server start-dev` with llmgw search attributes; returns once the frontend answers, then stays up until Ctrl-C',
  )
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
  .option('--node-id <id>', "this host's node id (default: hostname)")
  .option('--state-dir <dir>', 'where shard specs and logs live (default .llmgw/agents/<nodeId>)')
  .option(
    '--gpus <real|FILE>',
    'real: nvidia-smi and sysfs; FILE: a simulated inventory (YAML/JSON, or builtin:h100x8, builtin:a100x8, builtin:l40sx4)',
    'real',
  )
  .option('--sysfs-root <dir>', 'root of the sysfs tree to read', '/')
  .option('--advertise-addr <ip>', 'the address engines are reached at', '127.0.0.1')
  .option('--admin-addr <host:port>', 'admin gRPC API (Describe, TailLogs, health)', '127.0.0.1:7401')
  .option('--labels <k=v,...>', 'node labels (fabric=ib-a, pool=...)')
  .option('--managed-gpus <list>', 'GPU indices this agent may hand out, e.g. 0,1,2,3 (default: all)')
  .option('--port-range <from-to>', 'engine HTTP ports', '18000-18999')
  .option('--presence-heartbeat-seconds <s>', 'heartbeat timeout of the presence activity', '10')
  .option('--lost-grace-seconds <s>', 'NotReady for this long → Lost (GPUs released, replicas re-placed)', '60')
  .option('--ray-command <path>', 'the ray program, for profiles with launcher ray', 'ray')
  .option(
    '--ray-worker-ports <from-to>',
    "ports of Ray's worker processes; must not overlap --port-range",
    `${DEFAULT_PORTS.rayWorkersFrom}-${DEFAULT_PORTS.enginesFrom - 1}`,
  )
  .option('--reconcile <act|dry-run>', 'what reconciliation does with what it finds: act, or only show it (dry-run)', 'act')
  .option('--reconcile-every-seconds <s>', "how often the node's reconcile Schedule runs (0: only on registration)", '180')
  .action(async (opts: Record<string, unknown>) => {
    const { runAgent } = await import('../agent/main.js');
    await runAgent(opts);
  });

program
  .command('worker')
  .description('run the control worker (task queue llmgw): the workflows and the control activities')
  .option(
    '--catalog <file>',
    'catalog YAML (or LLMGW_CATALOG); edits are picked up without a restart',
    process.env.LLMGW_CATALOG ?? 'examples/catalog.yaml',
  )
  .action(async (opts: { catalog: string }) => {
    const { runControlWorker } = await import('../workers/control-worker.js');
    await runControlWorker({ catalogFile: opts.catalog });
  });

const nodes = program
  .command('nodes')
  .description('the GPU hosts: state, GPUs free/total, problems (and cordon, uncordon, remove)')
  .option('--json', 'machine-readable output')
  .action(async (opts: { json?: boolean }) => {
    const { nodesCommand } = await import('./commands/nodes.js');
    await nodesCommand(opts);
  });
nodes
  .command('cordon')
  .argument('<node>', 'node id')
  .description('place nothing new on the node; what runs there keeps running')
  .option('--reason <text>', 'shown in `llmgw nodes` and the Web UI')
  .action(async (nodeId: string, opts: { reason?: string }) => {
    const { cordonCommand } = await import('./commands/nodes.js');
    await cordonCommand(nodeId, true, opts);
  });
nodes
  .command('uncordon')
  .argument('<node>', 'node id')
  .description('let placements use the node again')
  .action(async (nodeId: string) => {
    const { cordonCommand } = await import('./commands/nodes.js');
    await cordonCommand(nodeId, false, {});
  });
nodes
  .command('remove')
  .argument('<node>', 'node id')
  .description('forget a host that is gone for good: its node workflow and its reconcile Schedule (its agent must be stopped)')
  .option('--force', 'remove it even though it still holds GPUs for shards')
  .action(async (nodeId: string, opts: { force?: boolean }) => {
    const { removeNodeCommand } = await import('./commands/nodes.js');
    await removeNodeCommand(nodeId, opts);
  });

program
  .command('reconcile')
  .description('match what agents run against the catalog and the workflows now, and print every action (all nodes when none is named)')
  .argument('[nodes...]', 'node ids')
  .option('--json', 'machine-readable output')
  .action(async (nodes: string[], opts: { json?: boolean }) => {
    const { reconcileCommand } = await import('./commands/reconcile.js');
    await reconcileCommand(nodes, opts);
  });

program
  .command('deploy')
  .argument('<model>', 'a model from the catalog')
  .description('deploy a model (or change the replica count of an existing deployment)')
  .option('--name <name>', 'deployment name (default: the model name)')
  .option('--replicas <n>', 'how many replicas', '1')
  .option('--profile <profile>', 'catalog profile (default: the first, or the first for --gpu-class)')
  .option('--gpu-class <class>', 'pick the first profile for this GPU class')
  .option('--wait', "show each replica's progress and exit 0 when all are Ready, non-zero with the reason otherwise")
  .option('--timeout <seconds>', 'how long --wait waits', '600')
  .option('--json', 'machine-readable output')
  .action(async (model: string, opts: import('./commands/deployments.js').DeployOptions) => {
    const { deployCommand } = await import('./commands/deployments.js');
    await deployCommand(model, opts);
  });

program
  .command('status')
  .argument('[name]', 'a deployment (default: all)')
  .description('deployments and their replicas: state, nodes, GPUs, endpoint, last reason')
  .option('--json', 'machine-readable output')
  .action(async (name: string | undefined, opts: { json?: boolean }) => {
    const { statusCommand } = await import('./commands/deployments.js');
    await statusCommand(name, opts);
  });

program
  .command('scale')
  .argument('<name>')
  .argument('<replicas>')
  .description('set the number of replicas of a deployment')
  .option('--json', 'machine-readable output')
  .action(async (name: string, replicas: string, opts: { json?: boolean }) => {
    const { scaleCommand } = await import('./commands/deployments.js');
    await scaleCommand(name, replicas, opts);
  });

program
  .command('undeploy')
  .argument('<name>')
  .description('drain every replica of a deployment, stop its engines and free its GPUs')
  .option('--no-wait', 'return once the drain has begun')
  .option('--json', 'machine-readable output')
  .action(async (name: string, opts: { wait: boolean; json?: boolean }) => {
    const { undeployCommand } = await import('./commands/deployments.js');
    await undeployCommand(name, opts);
  });

program
  .command('logs')
  .argument('<replica>', 'replica id: replica/NAME/SEQ or NAME/SEQ')
  .description("a replica's engine log, through its agent's admin API")
  .option('--rank <n>', 'which rank', '0')
  .option('-n, --lines <n>', 'how many lines first', '100')
  .option('-f, --follow', 'keep printing new lines')
  .action(async (replica: string, opts: { lines: string; follow?: boolean; rank: string }) => {
    const { logsCommand } = await import('./commands/deployments.js');
    await logsCommand(replica, opts);
  });

addRouterCommand(program);

program
  .command('up')
  .description('the local stack in one command: dev server, control worker, router, two simulated 8×H100 agents, and the demo deployment')
  .option('--catalog <file>', 'catalog for the control worker', process.env.LLMGW_CATALOG ?? 'examples/catalog.yaml')
  .option('--router-port <port>', 'router port', '8080')
  .option('--replicas <n>', 'demo replicas', '2')
  .action(async (opts: { catalog: string; routerPort: string; replicas: string }) => {
    const { upCommand } = await import('./commands/up.js');
    await upCommand(opts);
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
