// The `llmgw` command line: operator commands (deploy, scale, status, …) and the
// long-running processes (worker, agent, router, fake-engine, up). Each command's
// module is loaded only when it runs, so `llmgw fake-engine` starts fast.
import { Command, Option } from 'commander';
import { DEFAULT_PORTS } from '../common/names.js';
import { DEFAULT_LOST_GRACE_SECONDS } from '../common/node-types.js';
import { addRouterCommand } from '../router/command.js';
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
  .option(
    '--admin-addr <unix|unix:PATH|host:port>',
    'admin gRPC API (Describe, TailLogs, health): unix is <state dir>/admin.sock (0600); on TCP every call needs <state dir>/admin.token',
    'unix',
  )
  .option('--labels <k=v,...>', 'node labels (fabric=ib-a, pool=...)')
  .option('--managed-gpus <list>', 'GPU indices this agent may hand out, e.g. 0,1,2,3 (default: all)')
  .option('--port-range <from-to>', 'engine HTTP ports', '18000-18999')
  .option('--port-claims-dir <dir>', 'port claims shared with other agents on this host (default <state dir>/port-claims)')
  .option('--weights-dir <dir>', 'the host cache of model weights, in the Hugging Face cache layout (default <state dir>/weights)')
  .option(
    '--weights-budget <size|percent>',
    'how much of it weights may fill (500G, or 80% of its disk); least recently used revisions no shard uses are evicted',
  )
  .option(
    '--presence-heartbeat-seconds <s>',
    'heartbeat timeout of the presence activity (default: 300 where Temporal keeps worker heartbeats, which then detect a dead agent; else 10)',
  )
  .option(
    '--lost-grace-seconds <s>',
    'NotReady for this long → Lost (GPUs released, replicas re-placed; held while most of the fleet is silent)',
    String(DEFAULT_LOST_GRACE_SECONDS),
  )
  .option('--ray-command <path>', 'the ray program, for profiles with launcher ray', 'ray')
  .option(
    '--ray-worker-ports <from-to>',
    "ports of Ray's worker processes; must not overlap --port-range",
    `${DEFAULT_PORTS.rayWorkersFrom}-${DEFAULT_PORTS.enginesFrom - 1}`,
  )
  .option('--reconcile <act|dry-run>', 'what reconciliation does with what it finds: act, or only show it (dry-run)', 'act')
  .option(
    '--reconcile-every-seconds <s>',
    "how often the node's reconcile Schedule sweeps (0: never); changes are reconciled when the agent reports them",
    '3600',
  )
  .option(
    '--foreign-gpu-processes <report|kill>',
    'compute processes on managed GPUs that this agent did not start: report them and withhold their GPUs, or kill them (never in dry-run)',
    'report',
  )
  .option(
    '--catalog-key <file>',
    "the control worker's public key file (or LLMGW_CATALOG_PUBLIC_KEY_FILE, LLMGW_CATALOG_KEY_FILE): only revisions and placements it signed start here",
  )
  .option('--insecure-unsigned', 'start revisions nobody signed (unsafe: anyone who can start a workflow can run anything here)')
  .option('--pass-env <names>', "variables of the agent's environment every engine gets, e.g. HF_HOME,LD_LIBRARY_PATH,NCCL_IB_TIMEOUT")
  .option('--env-file <file>', 'NAME=value lines (0600) that engines get only where the catalog references them: {fromHost: NAME}')
  .option('--engine-user <user>', 'the unprivileged user engines run as (default llmgw-engine, else nobody; root: as the agent)')
  .option('--engine-key-file <file>', 'the API key engines require (vLLM/SGLang --api-key); give routers the same file')
  .option(
    '--metrics-addr <host:port|off>',
    'Prometheus /metrics: Temporal SDK and agent metrics (default LLMGW_METRICS_ADDR, else 127.0.0.1:9465)',
  )
  .option(
    '--gpu-watch <program|off>',
    'the nvidia-smi to ask about GPU health while engines run (default: nvidia-smi on real GPUs, off when simulated)',
  )
  .option('--xid-log <file>', 'a file the kernel log reaches (e.g. /var/log/kern.log): Xid 48/79/94/95 there hold a GPU out')
  .option('--gpu-watch-seconds <s>', 'how often the GPU health watch looks', '10')
  // Tests of the node workflow's continue-as-new; not for operators.
  .addOption(new Option('--node-continue-as-new-after-events <n>').hideHelp())
  .action(async (opts: Record<string, unknown>) => {
    const { runAgent } = await import('../agent/main.js');
    await runAgent(opts);
  });

registerSimCommands(program);

program
  .command('worker')
  .description('run the control worker (task queue llmgw): the workflows and the control activities')
  .option(
    '--catalog <file>',
    'catalog YAML (or LLMGW_CATALOG); edits are picked up without a restart',
    process.env.LLMGW_CATALOG ?? 'examples/catalog.yaml',
  )
  .option(
    '--catalog-key <file>',
    'key file every resolved revision is signed with; agents start only signed revisions (or LLMGW_CATALOG_KEY_FILE)',
    process.env.LLMGW_CATALOG_KEY_FILE || undefined,
  )
  .option(
    '--metrics-addr <host:port|off>',
    'Prometheus /metrics: Temporal SDK and worker metrics (default LLMGW_METRICS_ADDR, else 127.0.0.1:9464)',
  )
  .option(
    '--build-id <id>',
    "this build's Worker Deployment build id (LLMGW_BUILD_ID; default: package version + a hash of the workflow code)",
  )
  .option('--deployment-name <name>', 'the Worker Deployment (LLMGW_DEPLOYMENT_NAME)', process.env.LLMGW_DEPLOYMENT_NAME ?? 'llmgw')
  .option(
    '--make-current',
    'make this build the Current version at start (default: only when there is none yet; otherwise `llmgw upgrade`)',
  )
  .action(
    async (opts: {
      catalog: string;
      catalogKey?: string;
      metricsAddr?: string;
      buildId?: string;
      deploymentName: string;
      makeCurrent?: boolean;
    }) => {
      const { runControlWorker } = await import('../workers/control-worker.js');
      await runControlWorker({
        catalogFile: opts.catalog,
        catalogKeyFile: opts.catalogKey,
        metricsAddr: opts.metricsAddr,
        buildId: opts.buildId,
        deploymentName: opts.deploymentName,
        makeCurrent: opts.makeCurrent,
      });
    },
  );

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
