// Takes stock of the engines a previous agent left running: for each spec record in the state
// dir, decides whether its processes are still the ones it describes (adopt them), are gone
// (report the exit), or were never started. Agent side; reads /proc, changes nothing.
import type { Launcher } from '../processes/launcher.js';
import { sameProcess } from '../processes/process-table.js';
import type { MarkedProcess } from '../processes/markers.js';
import type { RecordedProcess, ShardRecord } from '../spec-store.js';

export const EXITED_WHILE_DOWN = 'engine exited while the agent was down';

export type RecordVerdict =
  /** Every process the launch has is alive and is the one recorded. */
  | { kind: 'alive'; processes: RecordedProcess[]; foundUnrecorded: RecordedProcess | undefined }
  /** Some recorded process is gone, or the start was cut short: the shard has failed. */
  | { kind: 'failed'; processes: RecordedProcess[]; message: string }
  /** The spec was written but nothing was spawned: startShard may still start it. */
  | { kind: 'not-started' };

function byStart(a: MarkedProcess, b: MarkedProcess): number {
  return Number(a.startTicks) - Number(b.startTicks) || a.pid - b.pid;
}

/**
 * The record is rewritten after each spawn, so an agent that died in between left at most
 * one spawned process unrecorded: the next role in the launch. It is found by its markers.
 * A process we spawn leads its own process group and its parent was the agent, so helpers
 * the engine forked (same markers, parent inside the shard) are not mistaken for it.
 */
function findUnrecorded(record: ShardRecord, marked: MarkedProcess[]): RecordedProcess | undefined {
  const role = record.launch.roles[record.processes.length];
  if (role === undefined) return undefined;
  const mine = marked.filter((m) => m.shardId === record.spec.shardId);
  const minePids = new Set(mine.map((m) => m.pid));
  const recorded = new Set(record.processes.map((p) => p.pid));
  const candidate = mine.filter((m) => m.pgrp === m.pid && !recorded.has(m.pid) && !minePids.has(m.ppid)).sort(byStart)[0];
  if (!candidate) return undefined;
  return { role, pid: candidate.pid, startTicks: candidate.startTicks, pgid: candidate.pid };
}

export function judgeRecord(launcher: Launcher, record: ShardRecord, marked: MarkedProcess[]): RecordVerdict {
  const foundUnrecorded = findUnrecorded(record, marked);
  const processes = foundUnrecorded ? [...record.processes, foundUnrecorded] : [...record.processes];
  if (processes.length === 0) return { kind: 'not-started' };

  const gone = processes.filter((p) => !sameProcess(launcher, p.pid, p.startTicks));
  if (gone.length > 0) {
    const which = gone.map((p) => `${p.role} pid ${p.pid}`).join(', ');
    return { kind: 'failed', processes, message: `${EXITED_WHILE_DOWN} (${which}; exit code unknown)` };
  }
  const expected = record.launch.roles.length;
  if (processes.length < expected) {
    const started = processes.map((p) => p.role).join(', ');
    return {
      kind: 'failed',
      processes,
      message: `the agent stopped while starting this shard: only ${started} of ${expected} process(es) were started`,
    };
  }
  return { kind: 'alive', processes, foundUnrecorded };
}
