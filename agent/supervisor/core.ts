// What every room of the engine supervisor shares: the shards it knows, their locks, the
// ports promised to starts in flight, and the one way a change is announced. Agent side.
// The rooms (recovery, start, watch, stop, unidentified) are functions over this state.
import { EventEmitter } from 'node:events';
import type { LineLevel } from '../../common/logger.js';
import { ShardState, type RunningShard, type ShardStatus } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { Launcher } from './processes/launcher.js';
import { KeyedLock } from './lock.js';
import type { ResolvedOptions, SupervisorEvent } from './options.js';
import { runningShard, shardStatus, type Shard } from './shard.js';
import { logPath, type ShardRecord } from './spec-store.js';

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export class SupervisorCore {
  readonly shards = new Map<string, Shard>();
  readonly locks = new KeyedLock();
  /** Ports chosen for starts that have not yet created their shard entry. */
  readonly reservedPorts = new Set<number>();
  /** GPUs of starts that passed the placement check and have no shard entry yet, by GPU → shard id. */
  readonly reservedGpus = new Map<number, string>();
  /** Of those starts, the ones whose engines can sleep: they may share their GPUs with other sleepers. */
  readonly reservedSleepers = new Set<string>();
  /** Processes found unidentified, by pid → start ticks: kill() may end these. */
  readonly unidentifiedSeen = new Map<number, string>();
  /** Shard ids whose spec file was corrupted, with the parse error (for kill reasons). */
  readonly corrupt = new Map<string, string>();
  /** Emits 'change' with a shard id whenever that shard's state or existence changes. */
  readonly changes = new EventEmitter();
  recovered = false;
  closed = false;

  constructor(readonly options: ResolvedOptions) {
    this.changes.setMaxListeners(0);
  }

  get nodeId(): string {
    return this.options.nodeId;
  }

  get launcher(): Launcher {
    return this.options.launcher;
  }

  log(line: string, level?: LineLevel): void {
    this.options.log(line, level);
  }

  count(event: SupervisorEvent): void {
    try {
      this.options.count?.(event);
    } catch (err) {
      this.log(`counting ${event.kind} failed: ${errorText(err)}`, 'warn');
    }
  }

  assertOpen(): void {
    if (this.closed) throw new Error('the supervisor is closed');
  }

  newShard(record: ShardRecord): Shard {
    return {
      spec: record.spec,
      record,
      logFile: logPath(this.options.stateDir, record.spec.shardId),
      procs: [],
      state: ShardState.STARTING,
      exited: false,
      signal: '',
      message: '',
      lastLogLines: [],
      adopted: false,
      stopping: false,
      healthFailures: 0,
      startAbort: new AbortController(),
    };
  }

  statusOf(shard: Shard): ShardStatus {
    return shardStatus(shard, this.nodeId, this.options.advertiseAddress);
  }

  running(shard: Shard): RunningShard {
    return runningShard(shard, this.nodeId, this.options.advertiseAddress);
  }

  emitChange(shardId: string): void {
    this.changes.emit('change', shardId);
  }

  /** Tells the agent (and through it the replica workflow) about a transition. */
  transitioned(shard: Shard): void {
    if (!this.options.onTransition) return;
    try {
      this.options.onTransition(this.statusOf(shard));
    } catch (err) {
      this.log(`onTransition for shard ${shard.spec.shardId} threw: ${errorText(err)}`, 'error');
    }
  }

  /** Pids of the processes our shards consist of, including what their engines forked. */
  ourPids(marked: { pid: number; pgrp: number; shardId: string }[]): Set<number> {
    const pids = new Set<number>();
    const groups = new Set<number>();
    for (const shard of this.shards.values()) {
      for (const p of shard.procs) {
        pids.add(p.pid);
        groups.add(p.pgid);
      }
    }
    for (const m of marked) if (this.shards.has(m.shardId) || groups.has(m.pgrp)) pids.add(m.pid);
    return pids;
  }
}
