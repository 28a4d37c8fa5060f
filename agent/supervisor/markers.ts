// Finds the processes that carry this agent's engine markers (LLMGW_NODE_ID and friends).
// Agent side: several agents can share one host, so an agent only ever judges processes
// marked with its own node id; everything else on the machine is someone else's.
import { ENGINE_MARKER_ENV } from '../../common/names.js';
import { listPids, readEnviron, readStat, selfAndAncestors, signalGroup } from './proc.js';

/**
 * Set on every process the supervisor spawns with an HTTP port, so that another agent on
 * the same host does not hand that port out again while the engine is still loading and
 * has not bound it yet.
 */
export const PORT_MARKER_ENV = 'LLMGW_HTTP_PORT';

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
export function scanMarked(nodeId: string): MarkedProcess[] {
  const skip = selfAndAncestors();
  const found: MarkedProcess[] = [];
  for (const pid of listPids()) {
    if (skip.has(pid)) continue;
    const env = readEnviron(pid);
    if (!env || env[ENGINE_MARKER_ENV.nodeId] !== nodeId) continue;
    const shardId = env[ENGINE_MARKER_ENV.shardId] ?? '';
    if (shardId === '') continue;
    const stat = readStat(pid);
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

/** Ports that engines started by any llmgw agent on this host were given (see PORT_MARKER_ENV). */
/**
 * Ends every engine that carries one of these node ids (SIGKILL to its process group).
 * For tearing down simulated hosts (`llmgw up`, benchmarks); agents stop their own shards.
 */
export function killMarkedEngines(nodeIds: string[]): number {
  let killed = 0;
  for (const nodeId of nodeIds) {
    for (const engine of scanMarked(nodeId)) {
      signalGroup(engine.pgrp, 'SIGKILL');
      killed++;
    }
  }
  return killed;
}

export function portsMarkedOnHost(): Set<number> {
  const skip = selfAndAncestors();
  const ports = new Set<number>();
  for (const pid of listPids()) {
    if (skip.has(pid)) continue;
    const value = readEnviron(pid)?.[PORT_MARKER_ENV];
    if (value === undefined || !/^\d+$/.test(value)) continue;
    const stat = readStat(pid);
    if (stat && stat.state !== 'Z') ports.add(Number(value));
  }
  return ports;
}
