// `llmgw agent`: the long-running process of one GPU host, with its flags. The action loads
// agent/main.ts on use, so other commands start without it.
import { Option, type Command } from 'commander';
import { DEFAULT_RAY_PORT_BLOCK } from '../../agent/engines/ray-ports.js';
import { DEFAULT_PORTS } from '../../common/names.js';
import { DEFAULT_LOST_GRACE_SECONDS } from '../../common/node-types.js';

export function register(program: Command): void {
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
      "ports of Ray's processes (raylet, object manager, agents, workers), a block per shard; must not overlap --port-range",
      `${DEFAULT_PORTS.rayWorkersFrom}-${DEFAULT_PORTS.enginesFrom - 1}`,
    )
    .option(
      '--ray-ports-per-shard <n>',
      "the size of each Ray shard's block: 8 fixed ports, the rest its workers' (Ray prestarts up to a worker per CPU)",
      String(DEFAULT_RAY_PORT_BLOCK),
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
    .option(
      '--enroll-with-catalog-key <file>',
      "enroll this agent's key with the catalog private key file at start (llmgw up, tests; or LLMGW_AGENT_ENROLL_KEY_FILE): a production host is enrolled with `llmgw nodes enroll`",
    )
    .option('--insecure-unsigned', 'start revisions nobody signed (unsafe: anyone who can start a workflow can run anything here)')
    .option('--pass-env <names>', "variables of the agent's environment every engine gets, e.g. HF_HOME,LD_LIBRARY_PATH,NCCL_IB_TIMEOUT")
    .option('--env-file <file>', 'NAME=value lines (0600) that engines get only where the catalog references them: {fromHost: NAME}')
    .option('--engine-user <user>', 'the unprivileged user engines run as (default llmgw-engine, else nobody; root: as the agent)')
    .option(
      '--engine-uid-range <start-end>',
      "run each shard's processes as a uid of its own from this range, e.g. 61000-61999 (root only; the group stays the engine user's)",
    )
    .option('--engine-key-file <file>', 'the API key engines require (vLLM/SGLang --api-key); give routers the same file')
    .option(
      '--engine-tls',
      'engines serve HTTPS with a certificate this agent issues at each start; routers accept only that certificate (its pin is in the signed route)',
    )
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
    .addOption(new Option('--reregister-after-seconds <n>').hideHelp())
    .action(async (opts: Record<string, unknown>) => {
      const { runAgent } = await import('../../agent/main.js');
      await runAgent(opts);
    })
    .command('keygen')
    .description("make this host's agent key pair in the state dir (0600) unless it exists, and print the public key to enroll")
    .option('--node-id <id>', "this host's node id (default: hostname)")
    .option('--state-dir <dir>', "the agent's state dir (default .llmgw/agents/<nodeId>)")
    .action(async (opts: { nodeId?: string; stateDir?: string }) => {
      const { agentKeygen } = await import('../actions/nodes-enroll.js');
      agentKeygen(opts);
    });
}
