// Finds the engines nobody can describe: processes marked with this agent's node id whose
// shard no readable spec names, and (on real GPUs) compute processes on the GPUs this agent
// manages. Agent side. They hold GPUs placement would hand out again, so they are killed.
import { ENGINE_MARKER_ENV } from '../../common/names.js';
import type { MarkedProcess } from './markers.js';
import type { Launcher } from './launcher.js';
import { membersOf } from './process-table.js';
import type { KillTarget } from './terminate.js';

/** A process on a managed GPU, as a GPU-aware caller found it (e.g. nvidia-smi's compute apps). */
export interface GpuProcess {
  pid: number;
  gpuIndices: number[];
  reason: string;
}

export interface Stranger {
  pid: number;
  startTicks: string;
  shardId: string;
  reason: string;
  gpuIndices: number[];
  command: string;
  target: KillTarget;
}

function gpuIndicesOf(launcher: Launcher, pid: number): number[] {
  const value = launcher.readEnviron(pid)?.CUDA_VISIBLE_DEVICES ?? '';
  if (!/^\d+(,\d+)*$/.test(value)) return [];
  return value.split(',').map(Number);
}

function commandOf(launcher: Launcher, pid: number): string {
  return (launcher.readCmdline(pid) ?? []).join(' ');
}

/**
 * Marked processes whose shard id `described` does not contain. `corrupt` gives the reason
 * for shard ids whose spec file exists but cannot be read. A whole process group is killed
 * when every live member of it is such a stranger (an engine and the helpers it forked);
 * otherwise only the process itself, so that nothing unmarked is ever signalled.
 */
export function markedStrangers(
  launcher: Launcher,
  marked: MarkedProcess[],
  described: ReadonlySet<string>,
  corrupt: ReadonlyMap<string, string>,
): Stranger[] {
  const strangers = marked.filter((m) => !described.has(m.shardId));
  const strangerPids = new Set(strangers.map((s) => s.pid));
  const wholeGroup = new Map<number, boolean>();
  const groupOk = (pgid: number): boolean => {
    let ok = wholeGroup.get(pgid);
    if (ok === undefined) {
      const members = membersOf(launcher, pgid);
      ok = pgid > 1 && members.length > 0 && members.every((m) => strangerPids.has(m.pid));
      wholeGroup.set(pgid, ok);
    }
    return ok;
  };
  return strangers.map((m) => {
    const corruptReason = corrupt.get(m.shardId);
    const reason =
      corruptReason !== undefined ? `no readable spec describes it (spec file corrupted: ${corruptReason})` : 'no spec describes it';
    const group = m.pgrp === m.pid && groupOk(m.pgrp);
    return {
      pid: m.pid,
      startTicks: m.startTicks,
      shardId: m.shardId,
      reason,
      gpuIndices: gpuIndicesOf(launcher, m.pid),
      command: commandOf(launcher, m.pid),
      target: { pid: m.pid, startTicks: m.startTicks, group },
    };
  });
}

/**
 * The GPU processes a caller found that are not ours to keep: never this agent or its
 * ancestors, never another agent's engine (another node id), never a process of a shard we
 * describe (`ours` says which pids those are). Only the process itself is signalled.
 */
export function gpuStrangers(
  launcher: Launcher,
  found: GpuProcess[],
  nodeId: string,
  described: ReadonlySet<string>,
  ours: ReadonlySet<number>,
  log: (line: string) => void,
): Stranger[] {
  const skip = launcher.selfAndAncestors();
  const out: Stranger[] = [];
  for (const g of found) {
    if (skip.has(g.pid) || ours.has(g.pid)) continue;
    const stat = launcher.readStat(g.pid);
    if (!stat || stat.state === 'Z') continue;
    const env = launcher.readEnviron(g.pid);
    const node = env?.[ENGINE_MARKER_ENV.nodeId];
    const shardId = env?.[ENGINE_MARKER_ENV.shardId] ?? '';
    if (node !== undefined && node !== nodeId) {
      log(`left pid ${g.pid} on GPU(s) ${g.gpuIndices.join(',')} alone: it belongs to agent ${node}`);
      continue;
    }
    if (node === nodeId && described.has(shardId)) continue;
    out.push({
      pid: g.pid,
      startTicks: stat.startTicks,
      shardId,
      reason: g.reason,
      gpuIndices: g.gpuIndices,
      command: commandOf(launcher, g.pid),
      target: { pid: g.pid, startTicks: stat.startTicks, group: false },
    });
  }
  return out;
}
