// The Ray side of a multi-node launch: `ray start` processes for the head and the workers,
// and reading `ray status` to learn when the cluster has every node. Agent side; pure.
import { leaderAddress, type ShardPlan } from './plan.js';
import type { EngineContext, EngineLaunch, ProcessSpec } from './types.js';

const DEFAULT_RAY_COMMAND = ['ray'];

function rayCommand(ctx: EngineContext): string[] {
  return ctx.rayCommand ?? DEFAULT_RAY_COMMAND;
}

/** Keeps Ray's workers off the agent's engine ports (Ray's default range covers them). */
function workerPortArgs(ctx: EngineContext): string[] {
  return ctx.rayWorkerPorts
    ? ['--min-worker-port', String(ctx.rayWorkerPorts.from), '--max-worker-port', String(ctx.rayWorkerPorts.to)]
    : [];
}

/**
 * Rank 0: the Ray head, then the engine, which waits until all `nnodes` nodes have joined.
 * `engineArgv` is the engine's full command, already carrying `--distributed-executor-backend ray`.
 */
export function rayLeaderLaunch(
  plan: ShardPlan,
  ctx: EngineContext,
  env: Record<string, string>,
  engineArgv: string[],
  healthPath: string,
): EngineLaunch {
  const head: ProcessSpec = {
    role: 'ray-head',
    argv: [
      ...rayCommand(ctx),
      'start',
      '--head',
      '--port',
      String(plan.spec.leaderPort),
      '--node-ip-address',
      ctx.advertiseAddress,
      ...workerPortArgs(ctx),
      '--block',
    ],
    env: { ...env },
    blocking: true,
  };
  const engine: ProcessSpec = {
    role: 'engine',
    argv: engineArgv,
    env: { ...env },
    waitForRayNodes: plan.nnodes,
    rayAddress: leaderAddress(plan),
    blocking: true,
  };
  return { processes: [head, engine], servesHttp: true, healthPath };
}

/** Ranks > 0: only a Ray worker joined to rank 0's head; the engine there drives its GPUs. */
export function rayWorkerLaunch(plan: ShardPlan, ctx: EngineContext, env: Record<string, string>, healthPath: string): EngineLaunch {
  const worker: ProcessSpec = {
    role: 'ray-worker',
    argv: [
      ...rayCommand(ctx),
      'start',
      '--address',
      leaderAddress(plan),
      '--node-ip-address',
      ctx.advertiseAddress,
      ...workerPortArgs(ctx),
      '--block',
    ],
    env: { ...env },
    blocking: true,
  };
  return { processes: [worker], servesHttp: false, healthPath };
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
