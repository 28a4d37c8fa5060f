// Where one shard's Ray processes listen: a block of ports of its own, laid out here, so that
// every port Ray opens to the network is known before it starts and the agent's firewall can
// admit only the placement's peers to them (agent/host/rendezvous-firewall.ts). Agent side; pure.
//
// Left to itself `ray start` picks the raylet's node manager and object manager ports, its agents'
// ports and its workers' ports at random (or from one range every replica on the host shares):
// listening on every address, unguarded, and reachable by anyone who reaches the host.

/** A contiguous run of ports, both ends included. */
export interface PortSpan {
  from: number;
  to: number;
}

/** The block's fixed slots, by offset; the rest of the block is the workers'. */
const SLOT = {
  nodeManager: 0,
  objectManager: 1,
  runtimeEnvAgent: 2,
  dashboardAgentListen: 3,
  dashboardAgentGrpc: 4,
  metricsExport: 5,
  /** Only on a head whose Ray has the client (ray[client]); otherwise unused. */
  rayClientServer: 6,
} as const;
const FIRST_WORKER_SLOT = 8;

/**
 * The smallest block: the fixed slots and a few workers. vLLM on Ray starts one worker per GPU of
 * the node, but Ray prestarts idle workers too (up to the node's CPUs), and a worker that finds no
 * free port in its range is refused: hosts with many cores want the default or more.
 */
export const MIN_RAY_PORT_BLOCK = FIRST_WORKER_SLOT + 8;
export const DEFAULT_RAY_PORT_BLOCK = 256;

/**
 * `ray start` arguments that pin each of Ray's listening ports inside `block`. The head's GCS port
 * is the rendezvous port (`--port`), chosen separately; `rayClient`: this Ray can run the Ray
 * Client server (it would otherwise listen on 10001), which only a head starts.
 */
export function rayPortArgs(block: PortSpan, options: { head: boolean; rayClient: boolean }): string[] {
  const at = (slot: number): string => String(block.from + slot);
  const args = [
    '--node-manager-port',
    at(SLOT.nodeManager),
    '--object-manager-port',
    at(SLOT.objectManager),
    '--runtime-env-agent-port',
    at(SLOT.runtimeEnvAgent),
    '--dashboard-agent-listen-port',
    at(SLOT.dashboardAgentListen),
    '--dashboard-agent-grpc-port',
    at(SLOT.dashboardAgentGrpc),
    '--metrics-export-port',
    at(SLOT.metricsExport),
    '--min-worker-port',
    at(FIRST_WORKER_SLOT),
    '--max-worker-port',
    String(block.to),
  ];
  // Passing it to a Ray without the client fails the start ("requires ray[client]").
  if (options.head && options.rayClient) args.push('--ray-client-server-port', at(SLOT.rayClientServer));
  return args;
}

/**
 * How many ports past SGLang's --dist-init-addr port rank 0 also listens on: SGLang's multi-node
 * ZMQ sockets sit at fixed offsets above it (port+1 … port+6, and one per data-parallel rank
 * beyond), so the rendezvous is a span, kept free and guarded whole. 16 covers dp sizes up to 9.
 */
export const SGLANG_RENDEZVOUS_SPAN = 16;
