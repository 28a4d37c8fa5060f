// Finds the processes that carry this agent's engine markers (LLMGW_NODE_ID and friends).
// Agent side: several agents can share one host, so an agent only ever judges processes
// marked with its own node id; everything else on the machine is someone else's.
import { ENGINE_MARKER_ENV } from '../../../common/names.js';
import { childProcessLauncher, type Launcher } from './launcher.js';

/**
 * Set on every process the supervisor spawns with an HTTP port, so that another agent on
 * the same host does not hand that port out again while the engine is still loading and
 * has not bound it yet.
 */
export const PORT_MARKER_ENV = 'LLMGW_HTTP_PORT';

/**
 * `from-to`: the block of Ray ports (start/ports.ts chooseRayPorts) a Ray process of ours was
 * given, so that agents with other claim directories on this host do not choose the same block
 * while its raylet has not bound it yet.
 */
export const RAY_PORTS_MARKER_ENV = 'LLMGW_RAY_PORTS';

export interface MarkedProcess {
  pid: number;
  ppid: number;
  pgrp: number;
  startTicks: string;
  shardId: string;
  replicaId: string;
}

/**
 * Every live process marked with `nodeId` and a shard id. Processes whose environment we
 * cannot read (other users') cannot be ours. The agent itself and its ancestors are never
 * included, even if someone started the agent with the markers set.
 */
export function scanMarked(nodeId: string, launcher: Launcher = childProcessLauncher): MarkedProcess[] {
  const skip = launcher.selfAndAncestors();
  const found: MarkedProcess[] = [];
  for (const pid of launcher.listPids()) {
    if (skip.has(pid)) continue;
    const env = launcher.readEnviron(pid);
    if (!env || env[ENGINE_MARKER_ENV.nodeId] !== nodeId) continue;
    const shardId = env[ENGINE_MARKER_ENV.shardId] ?? '';
    if (shardId === '') continue;
    const stat = launcher.readStat(pid);
    if (!stat || stat.state === 'Z' || stat.state === 'X') continue;
    found.push({
      pid,
      ppid: stat.ppid,
      pgrp: stat.pgrp,
      startTicks: stat.startTicks,
      shardId,
      replicaId: env[ENGINE_MARKER_ENV.replicaId] ?? '',
    });
  }
  return found;
}

/**
 * Ends every engine that carries one of these node ids (SIGKILL to its process group).
 * For tearing down simulated hosts (`llmgw up`, benchmarks); agents stop their own shards.
 */
export function killMarkedEngines(nodeIds: string[], launcher: Launcher = childProcessLauncher): number {
  let killed = 0;
  for (const nodeId of nodeIds) {
    for (const engine of scanMarked(nodeId, launcher)) {
      launcher.signalGroup(engine.pgrp, 'SIGKILL');
      killed++;
    }
  }
  return killed;
}

/** Ports that engines started by any llmgw agent on this host were given (see PORT_MARKER_ENV). */
export function portsMarkedOnHost(launcher: Launcher = childProcessLauncher): Set<number> {
  const skip = launcher.selfAndAncestors();
  const ports = new Set<number>();
  for (const pid of launcher.listPids()) {
    if (skip.has(pid)) continue;
    const value = launcher.readEnviron(pid)?.[PORT_MARKER_ENV];
    if (value === undefined || !/^\d+$/.test(value)) continue;
    const stat = launcher.readStat(pid);
    if (stat && stat.state !== 'Z') ports.add(Number(value));
  }
  return ports;
}

/** Blocks of Ray ports that Ray processes started by any llmgw agent on this host were given. */
export function rayPortsMarkedOnHost(launcher: Launcher = childProcessLauncher): { from: number; to: number }[] {
  const skip = launcher.selfAndAncestors();
  const spans = new Map<string, { from: number; to: number }>();
  for (const pid of launcher.listPids()) {
    if (skip.has(pid)) continue;
    const value = launcher.readEnviron(pid)?.[RAY_PORTS_MARKER_ENV];
    const span = value === undefined ? undefined : /^(\d+)-(\d+)$/.exec(value);
    if (!span || spans.has(value!)) continue;
    const stat = launcher.readStat(pid);
    if (stat && stat.state !== 'Z') spans.set(value!, { from: Number(span[1]), to: Number(span[2]) });
  }
  return [...spans.values()];
}
