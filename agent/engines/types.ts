// The shapes the engine command builders produce: what the agent's supervisor spawns for
// one shard, as argument vectors (never shell strings). Agent side; pure data, no I/O.

export type ProcessRole = 'engine' | 'ray-head' | 'ray-worker';

/**
 * One process the supervisor spawns for a shard.
 *
 * With the Ray launcher a shard is more than one process. Rank 0 runs
 * `ray start --head --port P --block` first: a long-running process the agent
 * supervises like an engine (`ray start` without `--block` daemonises and returns,
 * leaving nothing to watch or signal). Only once `ray status` shows all `nnodes`
 * nodes does rank 0 start the engine (`vllm serve … --distributed-executor-backend ray`),
 * because vLLM places its workers on the cluster as it finds it at start-up and
 * fails rather than wait for a late node. Ranks > 0 run only
 * `ray start --address LEADER:P --block`; their GPUs are driven from rank 0 through Ray.
 */
export interface ProcessSpec {
  role: ProcessRole;
  /** argv[0] is the program; spawned without a shell. */
  argv: string[];
  /** The variables this shard sets, laid over the agent's own environment. */
  env: Record<string, string>;
  /**
   * Start this process only after the Ray cluster at `rayAddress` reports this many
   * nodes (see ray.ts: rayStatusArgs, parseRayStatusNodeCount). Set on rank 0's
   * engine when the launcher is Ray.
   */
  waitForRayNodes?: number;
  /** The cluster to poll for `waitForRayNodes`: the head's host:port. */
  rayAddress?: string;
  /**
   * True when the process stays in the foreground for the shard's whole life, so its
   * exit means the shard has failed. Every process built here is; a false value would
   * mark a one-shot setup step whose success is a zero exit.
   */
  blocking: boolean;
}

export interface EngineLaunch {
  /** In start order; a later process starts only once the earlier ones are running. */
  processes: ProcessSpec[];
  /** Only rank 0 of a replica serves the OpenAI API; worker ranks are Ready once joined. */
  servesHttp: boolean;
  /** Where the agent polls the engine's health when `servesHttp`. */
  healthPath: string;
}

/**
 * What the agent knows that the StartShard does not: where this host is reached and
 * which port it chose, and how to invoke each engine here (tests and simulated hosts
 * substitute real binaries).
 */
export interface EngineContext {
  /** The address other hosts and the router use to reach this host. */
  advertiseAddress: string;
  /** The port the agent chose for this shard (the spec's, or one from its range). */
  httpPort: number;
  /** e.g. [process.execPath, '/path/bin/llmgw.js', 'fake-engine'] */
  fakeEngineCommand: string[];
  /** Default ['vllm']. */
  vllmCommand?: string[];
  /** Default ['python3']; SGLang runs as `python3 -m sglang.launch_server`. */
  pythonCommand?: string[];
  /** Default ['ray']. */
  rayCommand?: string[];
  /** The agent's range for Ray's ports (--ray-worker-ports); each shard's block comes from it. */
  rayWorkerPorts?: { from: number; to: number };
  /** This shard's own block of that range: every port its Ray processes listen on (ray-ports.ts). */
  rayPorts?: { from: number; to: number };
  /** This host's Ray has the Ray Client (ray[client]): its port is pinned in the head's block too. */
  rayClient?: boolean;
  /** The host's interface that carries advertiseAddress: NCCL/Gloo bootstrap when the spec names none. */
  managementInterface?: string;
  /** The host's weights cache: fetched sources run from their snapshot there (agent/weights). */
  weightsDir?: string;
  /** llama.cpp's server (llamacpp-binary.ts); absent when this host has none, and a llamacpp shard is refused saying how to install it. */
  llamaServerCommand?: string[];
  /** Whether that llama-server was built with a GPU backend, so layers are offloaded (--n-gpu-layers). */
  llamaServerGpu?: boolean;
  /** The host's CPU cores and GPUs, to give a CPU-bound engine its share of the cores. */
  hostCpus?: number;
  hostGpus?: number;
  /**
   * The certificate and key the agent issued for this start (--engine-tls): rank 0 serves HTTPS
   * with them (agent/supervisor/start/engine-tls.ts). Absent: plain HTTP.
   */
  tls?: EngineTlsFiles;
  /**
   * A simulated host's GPU ledger (common/sim-gpu-ledger.ts): fake engines account their
   * simulated GPU memory there, so that engines sharing a GPU see each other. Absent on real GPUs.
   */
  simulatedGpuLedger?: string;
}

export interface EngineTlsFiles {
  certFile: string;
  keyFile: string;
}
