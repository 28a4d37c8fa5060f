// Sorts the processes this agent did not start from a spec: strangers (marked with this
// agent's node id, yet no readable spec names their shard: ours, and nobody can describe
// them) and foreign processes (computing on a GPU this agent manages without our markers:
// someone else's). Agent side; reads the process table, signals nothing.
import { ENGINE_MARKER_ENV } from '../../../common/names.js';
import { redactArgv } from '../../../common/redact.js';
import type { MarkedProcess } from '../processes/markers.js';
import type { Launcher } from '../processes/launcher.js';
import { membersOf } from '../processes/process-table.js';
import type { KillTarget } from '../stop/terminate.js';

/** A process on a managed GPU, as a GPU-aware caller found it (e.g. nvidia-smi's compute apps). */
export interface GpuProcess {
  pid: number;
  gpuIndices: number[];
  usedMemoryMib?: number;
}

/** A compute process on a managed GPU that this agent did not start. */
export interface Foreign {
  pid: number;
  startTicks: string;
  gpuIndices: number[];
  command: string;
  usedMemoryMib: number;
  /** The node id of the llmgw agent whose engine it is; '' when it is not llmgw's at all. */
  agent: string;
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

/** A stranger's command line for its report (it goes to Temporal and the logs): credentials masked. */
function commandOf(launcher: Launcher, pid: number): string {
  return redactArgv(launcher.readCmdline(pid) ?? []).join(' ');
}

/**
 * What a foreign process is, in a few words: its program and script, never its options or
 * values, which may hold its owner's secrets (this goes into registrations and logs).
 */
export function foreignCommand(argv: string[] | undefined): string {
  if (!argv || argv.length === 0) return '(unreadable)';
  const shown = [argv[0]!];
  const script = argv[1];
  if (script !== undefined && !script.startsWith('-') && !script.includes('=')) shown.push(script);
  const text = shown.map((word) => (word.length > 80 ? `${word.slice(0, 77)}...` : word)).join(' ');
  return argv.length > shown.length ? `${text} …` : text;
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
 * The GPU processes a caller found that this agent did not start: never this agent or its
 * ancestors, never a process of a shard we describe (`ours` says which pids those are), and
 * not the strangers marked with our node id either (markedStrangers finds those).
 */
export function foreignProcesses(launcher: Launcher, found: GpuProcess[], nodeId: string, ours: ReadonlySet<number>): Foreign[] {
  const skip = launcher.selfAndAncestors();
  const out: Foreign[] = [];
  for (const g of found) {
    if (skip.has(g.pid) || ours.has(g.pid)) continue;
    const stat = launcher.readStat(g.pid);
    if (!stat || stat.state === 'Z') continue;
    const env = launcher.readEnviron(g.pid);
    const node = env?.[ENGINE_MARKER_ENV.nodeId];
    const shardId = env?.[ENGINE_MARKER_ENV.shardId] ?? '';
    // Marked with our node id: ours (described), or a stranger markedStrangers reports.
    if (node === nodeId && shardId !== '') continue;
    out.push({
      pid: g.pid,
      startTicks: stat.startTicks,
      gpuIndices: [...g.gpuIndices],
      command: foreignCommand(launcher.readCmdline(g.pid)),
      usedMemoryMib: g.usedMemoryMib ?? 0,
      agent: node !== undefined && node !== nodeId ? node : '',
    });
  }
  return out;
}
