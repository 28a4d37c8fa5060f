// The Ray side of a multi-node launch: `ray start` processes for the head and the workers,
// and reading `ray status` to learn when the cluster has every node. Agent side; pure.
import { leaderAddress, type ShardPlan } from './plan.js';
import { rayPortArgs } from './ray-ports.js';
import type { EngineContext, EngineLaunch, ProcessSpec } from './types.js';

const DEFAULT_RAY_COMMAND = ['ray'];

function rayCommand(ctx: EngineContext): string[] {
  return ctx.rayCommand ?? DEFAULT_RAY_COMMAND;
}

/**
 * Every port Ray listens on pinned inside the shard's own block (ray-ports.ts), which the agent's
 * firewall opens to the placement's peers only. Without a block (a caller that chose none), the
 * workers are at least kept off the agent's engine ports, which Ray's default range covers.
 */
function portArgs(ctx: EngineContext, head: boolean): string[] {
  if (ctx.rayPorts) return rayPortArgs(ctx.rayPorts, { head, rayClient: ctx.rayClient === true });
  return ctx.rayWorkerPorts
    ? ['--min-worker-port', String(ctx.rayWorkerPorts.from), '--max-worker-port', String(ctx.rayWorkerPorts.to)]
    : [];
}

/** `ray start` on this host, joined by `join` (`--head --port P`, or `--address` of the head); blocks. */
function rayStart(ctx: EngineContext, env: Record<string, string>, role: ProcessSpec['role'], join: string[]): ProcessSpec {
  const head = role === 'ray-head';
  const argv = [...rayCommand(ctx), 'start', ...join, '--node-ip-address', ctx.advertiseAddress, ...portArgs(ctx, head), '--block'];
  return { role, argv, env: { ...env }, blocking: true };
}

/**
 * A vLLM-style engine (vLLM, or the fake engine in its place) on a Ray cluster. Rank 0: the
 * Ray head, then `engineArgv` with Ray as its executor and `extra` (the profile's args) last;
 * the engine waits until all `nnodes` nodes have joined. Ranks > 0: only a Ray worker joined
 * to rank 0's head; the engine there drives their GPUs.
 */
export function rayLaunch(
  plan: ShardPlan,
  ctx: EngineContext,
  env: Record<string, string>,
  /** Asked for on rank 0 only: only rank 0 has an HTTP port to put in it. */
  engineArgv: () => string[],
  extra: string[],
  healthPath: string,
): EngineLaunch {
  if (plan.rank > 0) {
    return { processes: [rayStart(ctx, env, 'ray-worker', ['--address', leaderAddress(plan)])], servesHttp: false, healthPath };
  }
  const head = rayStart(ctx, env, 'ray-head', ['--head', '--port', String(plan.spec.leaderPort)]);
  const engine: ProcessSpec = {
    role: 'engine',
    argv: [...engineArgv(), '--distributed-executor-backend', 'ray', ...extra],
    env: { ...env },
    waitForRayNodes: plan.nnodes,
    rayAddress: leaderAddress(plan),
    blocking: true,
  };
  return { processes: [head, engine], servesHttp: true, healthPath };
}

/** Arguments after the ray command to ask the cluster at `address` (host:port) for its nodes. */
export function rayStatusArgs(address: string): string[] {
  return ['status', '--address', address];
}

// Sections of `ray status` that list nodes in the cluster now. Ray 2.x lists nodes with
// work under "Active:" and those without under "Idle:"; a worker that has just joined has
// nothing to do yet, so it is idle and must be counted too. Ray 1.x called the list "Healthy:".
const LIVE_NODE_SECTIONS = ['Active:', 'Idle:', 'Healthy:'];

/**
 * Counts the live nodes in `ray status` output, e.g.
 *
 * ```
 * Node status
 * ---------------------------------------------------------------
 * Active:
 *  1 node_5f3c9a…
 * Idle:
 *  1 node_81d0e2…
 * Pending:
 *  (no pending nodes)
 * ```
 *
 * Each entry is ` <count> <node type>`; a cluster started by hand has one entry per node
 * (`node_<id>`), an autoscaled one a count per type, so the counts are summed. Pending and
 * failed nodes are not counted: the engine must not start until they have joined. Output
 * without a node list (Ray not up yet) counts 0.
 */
export function parseRayStatusNodeCount(stdout: string): number {
  let counting = false;
  let nodes = 0;
  for (const raw of stdout.split(/\r?\n/)) {
    const line = raw.trimEnd();
    if (line === '') continue;
    // An unindented line is a heading ("Pending:", "Resources", "Node: …"): it opens or
    // closes a list.
    if (!/^\s/.test(line)) {
      counting = LIVE_NODE_SECTIONS.includes(line);
      continue;
    }
    if (!counting) continue;
    const entry = /^\s+(\d+)\s+\S/.exec(line);
    if (entry?.[1] !== undefined) nodes += Number(entry[1]);
  }
  return nodes;
}
