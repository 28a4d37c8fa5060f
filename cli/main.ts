// The `llmgw` command line: operator commands (deploy, scale, status, …) and the
// long-running processes (worker, agent, router, fake-engine, up). Each command's
// module is loaded only when it runs, so `llmgw fake-engine` starts fast.
import { Command, Option } from 'commander';
import { addRouterCommand } from '../router/command.js';
import { registerProcessCommands } from './commands-processes.js';
import { registerSimCommands } from './commands-sim.js';
import { registerTemporalCommands } from './commands-temporal.js';
import { registerWeightsCommands } from './commands-weights.js';
import { profileOnSignal } from '../common/cpu-profile.js';

profileOnSignal(process.argv[2] ?? 'llmgw');

const program = new Command();
program
  .name('llmgw')
  .description('Run LLM inference engines as Temporal-managed replicas on GPU hosts, behind one OpenAI-compatible endpoint.')
  .showHelpAfterError()
  .enablePositionalOptions();

registerTemporalCommands(program);

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

registerProcessCommands(program);

registerSimCommands(program);

program
  .command('upgrade')
  .description(
    'move running workflows to a new control-worker build: make it Current, then each deployment, replica and node hands over at its next safe point (docs/upgrades.md)',
  )
  .option('--build-id <id>', 'the build to move to (default: the newest version of the Worker Deployment)')
  .option('--deployment-name <name>', 'the Worker Deployment', process.env.LLMGW_DEPLOYMENT_NAME ?? 'llmgw')
  .option('--timeout <seconds>', 'how long to wait for every run to move', '300')
  .option('--move-stranded', 'also end runs pinned to a build no worker serves; reconciliation adopts their engines (docs/upgrades.md)')
  .action(async (opts: { buildId?: string; deploymentName: string; timeout: string; moveStranded?: boolean }) => {
    const { upgradeCommand } = await import('./commands/upgrade.js');
    await upgradeCommand(opts);
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
  .command('clear-gpu')
  .argument('<node>', 'node id')
  .argument('<gpu>', 'GPU index')
  .description('return a GPU the agent held out for a fault (Xid, ECC, gone) once it is sound again')
  .action(async (nodeId: string, gpu: string) => {
    const { clearGpuCommand } = await import('./commands/nodes.js');
    await clearGpuCommand(nodeId, gpu);
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

registerWeightsCommands(program);

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
  .option('--replicas <n>', 'how many replicas (default 1; on an existing deployment, its count is kept unless given)')
  .option(
    '--profile <profile>',
    'catalog profile (default: the first, or the first for --gpu-class); on an existing deployment, rolls out to it',
  )
  .option('--rollout <auto|manual>', 'auto: a catalog edit to its profile rolls out by itself (default manual)')
  .option('--max-surge <n>', 'rollouts: replicas above the count while rolling (default 1)')
  .option('--max-unavailable <n>', 'rollouts: routable replicas it may go below the count (default 0)')
  .option('--gpu-class <class>', 'pick the first profile for this GPU class')
  .option('--min-replicas <n>', 'autoscale on load: the fewest replicas (0: go Idle when unused, woken by the next request)')
  .option('--max-replicas <n>', 'autoscale on load: the most replicas')
  .option('--idle-to-zero <seconds>', 'with --min-replicas 0: go to zero after this long with no request')
  .option('--autoscale-metric <metric>', 'what autoscaling follows: inFlight (default), waiting or kvCache')
  .option('--autoscale-target <n>', 'per replica: requests in flight (default 8), waiting (2), or KV-cache use (0.8)')
  .option('--wait', "show each replica's progress and exit 0 when all are Ready, non-zero with the reason otherwise")
  .option('--timeout <seconds>', 'how long --wait waits', '600')
  .option('--json', 'machine-readable output')
  .action(async (model: string, opts: import('./commands/deployments.js').DeployOptions) => {
    const { deployCommand } = await import('./commands/deployments.js');
    await deployCommand(model, opts);
  });

program
  .command('rollout')
  .argument('<name>', 'a deployment')
  .description(
    'move a deployment to another revision: surge when there is room, drain-first when not, counted once routers route to it, rolled back on failure',
  )
  .option('--profile <profile>', "the profile to roll to (default: the catalog's current revision of the profile it runs)")
  .option('--max-surge <n>', 'replicas above the count while rolling (default 1)')
  .option('--max-unavailable <n>', 'routable replicas it may go below the count (default 0)')
  .option('--undo', 'roll back: abandon the rollout in progress, or return to the revision before the last one')
  .option('--pause', 'hold the rollout where it is')
  .option('--resume', 'go on with a paused rollout')
  .option(
    '--refresh-source',
    "move the weights to what the source's ref (a branch, or the default one) points at now; without it the pinned commit is kept",
  )
  .option('--no-prefetch', 'drain without first fetching the new weights onto the hosts (its replicas fetch as they start)')
  .option('--wait', 'print each step and exit 0 when it completes, non-zero when it rolls back or fails')
  .option('--timeout <seconds>', 'how long --wait waits', '1800')
  .option('--json', 'machine-readable output')
  .action(async (name: string, opts: import('./commands/rollout.js').RolloutOptions) => {
    const { rolloutCommand } = await import('./commands/rollout.js');
    await rolloutCommand(name, opts);
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
  .argument('[replicas]')
  .description('set the number of replicas of a deployment, or the bounds of an autoscaled one (--min/--max)')
  .option('--min <n>', 'autoscaling: the fewest replicas (0 lets it go Idle)')
  .option('--max <n>', 'autoscaling: the most replicas')
  .option('--idle-to-zero <seconds>', 'autoscaling with --min 0: go Idle after this long with no request')
  .option('--no-autoscale', 'turn autoscaling off, keeping the current count')
  .option('--json', 'machine-readable output')
  .action(async (name: string, replicas: string | undefined, opts: import('./commands/scale.js').ScaleOptions) => {
    const { scaleCommand } = await import('./commands/scale.js');
    await scaleCommand(name, replicas, opts);
  });

program
  .command('undeploy')
  .argument('<name>')
  .description('drain every replica of a deployment, stop its engines and free its GPUs')
  .option('--no-wait', 'return once the drain has begun')
  .option('--json', 'machine-readable output')
  .action(async (name: string, opts: { wait: boolean; json?: boolean }) => {
    const { undeployCommand } = await import('./commands/scale.js');
    await undeployCommand(name, opts);
  });

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
    const { logsCommand } = await import('./commands/scale.js');
    await logsCommand(replica, opts);
  });

addRouterCommand(program);

program
  .command('keygen')
  .description("make the control plane's Ed25519 key pair: FILE (0600) for control workers, FILE.pub for agents and routers")
  .argument('<file>', 'the private key file to create (left alone when it exists)')
  .action(async (file: string) => {
    const { ensureCatalogKeyFile, publicKeyFileOf } = await import('../common/catalog-key.js');
    const created = ensureCatalogKeyFile(file);
    console.log(`${created ? 'created' : 'kept the existing'} ${file}; public keys in ${publicKeyFileOf(file)}`);
  });

program
  .command('up')
  .description('the local stack in one command: dev server, control worker, router, two simulated 8×H100 agents, and the demo deployment')
  .option('--catalog <file>', 'catalog for the control worker', process.env.LLMGW_CATALOG ?? 'examples/catalog.yaml')
  .option('--router-port <port>', 'router port', '8080')
  .option('--replicas <n>', 'demo replicas', '2')
  .option('--port-offset <n>', 'added to every port the stack opens (Temporal, Web UI, router, agents, metrics, engines)', '0')
  .option('--node-prefix <prefix>', 'the simulated agents are <prefix>-a and <prefix>-b', 'sim')
  .action(async (opts: import('./commands/up.js').UpOptions) => {
    const { upCommand } = await import('./commands/up.js');
    await upCommand(opts);
  });

program.addOption(new Option('--json', 'machine-readable output where supported').hideHelp());
// Answered in main() before parsing: the build id takes a bundle of the workflow code (async),
// and commander's own --version prints a fixed string.
program.option('-V, --version', 'print the release and the build id control workers of this install declare');

export async function main(argv: string[]): Promise<void> {
  try {
    if (argv[2] === '--version' || argv[2] === '-V') {
      const { versionCommand } = await import('./commands/version.js');
      return await versionCommand();
    }
    await program.parseAsync(argv);
  } catch (error) {
    console.error(`llmgw: ${error instanceof Error ? error.message : String(error)}`);
    // Exit now: a long-running command that failed while starting may hold handles (a
    // Temporal Runtime, a half-started server) that would keep the process alive.
    process.exit(1);
  }
}

void main(process.argv);
