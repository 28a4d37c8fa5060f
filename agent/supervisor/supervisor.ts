// The agent's engine supervisor: spawns, watches, stops and (after an agent restart) adopts
// the engine processes on one host. Agent side. Engines outlive the agent: each runs in its
// own process group, writes straight to its log file, and is described by a spec record
// written before it was spawned, so a `kill -9` of the agent leaves them serving and the
// next agent takes them over instead of starting new ones.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync } from 'node:fs';
import { EventEmitter } from 'node:events';
import { clone, create } from '@bufbuild/protobuf';
import { ApplicationFailure } from '@temporalio/common';
import { FailureType } from '../../common/failures.js';
import { isSafeShardId } from '../../common/names.js';
import {
  KillProcessesResultSchema,
  UnidentifiedProcessSchema,
  type KillProcessesResult,
  type UnidentifiedProcess,
} from '../../proto/gen/llmgw/v1/register_pb.js';
import {
  ShardState,
  StartShardSchema,
  StopShardResultSchema,
  type RunningShard,
  type ShardStatus,
  type StartShard,
  type StopShard,
  type StopShardResult,
} from '../../proto/gen/llmgw/v1/shard_pb.js';
import { buildEngineLaunch, type EngineContext, type EngineLaunch, type ProcessSpec } from '../engines/index.js';
import { hostPort } from '../engines/plan.js';
import { EXITED_WHILE_DOWN, judgeRecord } from './adopt.js';
import { probeHealth, probeHost, type ProbeResult } from './health.js';
import { KeyedLock } from './lock.js';
import { adoptionLine, appendLogLine, enforceLogLimit, openLogForChild, tailLines } from './logs.js';
import { claimPort } from './port-claims.js';
import { PORT_MARKER_ENV, portsMarkedOnHost, scanMarked, type MarkedProcess } from './markers.js';
import { allocatePort, validatePortRange, type PortRange } from './ports.js';
import { isAlive, isSameProcess, readStat, readStartTicks, selfAndAncestors } from './proc.js';
import {
  describeExit,
  exitDetails,
  LOG_TAIL_LINES,
  mainProcess,
  runningShard,
  shardStatus,
  type ProcessExit,
  type Shard,
  type ShardProcess,
} from './shard.js';
import { specDifferences } from './spec-diff.js';
import {
  checkStateDirWritable,
  logPath,
  readAllRecords,
  recordPath,
  removeRecord,
  removeStaleTempFiles,
  setAsideCorrupt,
  writeRecordAtomic,
  type ShardRecord,
  type UnreadableRecord,
} from './spec-store.js';
import { gpuStrangers, markedStrangers, type GpuProcess, type Stranger } from './strangers.js';
import { targetAlive, terminate, type KillTarget } from './terminate.js';
import { waitUntilReady, type WaitHealthyOptions } from './wait-healthy.js';

export interface SupervisorOptions {
  nodeId: string;
  stateDir: string;
  /** The agent's own engine port range, inclusive. */
  portRange: PortRange;
  /** Where engines bind and are reached (by the router, other ranks, and our health probes). */
  advertiseAddress: string;
  /** How to invoke each engine here; the supervisor fills in the address and the chosen port. */
  engineContext: Omit<EngineContext, 'httpPort' | 'advertiseAddress'>;
  healthIntervalMs?: number;
  healthTimeoutMs?: number;
  /** Consecutive failed probes after which a Ready engine is reported unhealthy. */
  unhealthyAfterFailures?: number;
  stopGraceSeconds?: number;
  /** SIGTERM-to-SIGKILL grace for processes nobody describes. */
  unidentifiedGraceMs?: number;
  /** A worker rank (no HTTP) is Ready once its process has been up this long. */
  workerReadyAfterMs?: number;
  maxLogBytes?: number;
  logCheckIntervalMs?: number;
  /** Variables of the agent's own environment that engines also get (besides PATH, HOME, LANG, …). */
  passEnv?: string[];
  /** Called only on transitions (Ready, unhealthy, back to Ready, exited), never on every poll. */
  onTransition?: (status: ShardStatus) => void;
  log?: (line: string) => void;
  /** On real GPUs: compute processes on the GPUs this agent manages (e.g. from nvidia-smi). */
  extraUnidentified?: () => Promise<GpuProcess[]>;
  /**
   * Resolves once the Ray cluster at `process.rayAddress` has `process.waitForRayNodes` nodes
   * (see engines/ray.ts: rayStatusArgs, parseRayStatusNodeCount). The supervisor does not run
   * `ray status` itself; the agent provides this. Must honour `signal` (a stop cancels it).
   */
  waitForRay?: (spec: StartShard, process: ProcessSpec, signal: AbortSignal) => Promise<void>;
  /** Test hook: runs just before each spawn, after the spec record has been written. */
  beforeSpawn?: (info: { shardId: string; recordFile: string; process: ProcessSpec }) => void | Promise<void>;
  /** Test hook: runs after every process of a start is spawned, before start() returns. */
  afterSpawn?: (info: { shardId: string }) => void | Promise<void>;
}

export interface RecoveryReport {
  adopted: RunningShard[];
  /** Shards whose engine died while no agent was watching: reported as Failed, record kept. */
  exited: RunningShard[];
  unidentified: UnidentifiedProcess[];
}

// Engines get a clean environment: the agent's own (its Temporal credentials, its LLMGW_*
// markers if someone set them) is none of their business.
const BASE_ENV = ['PATH', 'HOME', 'LANG', 'LC_ALL', 'TMPDIR', 'USER', 'TZ'];
const PORT_LOCK = ' ports';

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export class Supervisor {
  private readonly shards = new Map<string, Shard>();
  private readonly locks = new KeyedLock();
  /** Ports chosen for starts that have not yet created their shard entry. */
  private readonly reservedPorts = new Set<number>();
  /** Processes found unidentified, by pid → start ticks: kill() may end these. */
  private readonly unidentifiedSeen = new Map<number, string>();
  /** Shard ids whose spec file was corrupted, with the parse error (for kill reasons). */
  private readonly corrupt = new Map<string, string>();
  private readonly changes = new EventEmitter();
  private readonly logTimer: NodeJS.Timeout;
  private recovered = false;
  private closed = false;

  private readonly healthIntervalMs: number;
  private readonly healthTimeoutMs: number;
  private readonly unhealthyAfter: number;
  private readonly stopGraceSeconds: number;
  private readonly unidentifiedGraceMs: number;
  private readonly workerReadyAfterMs: number;
  private readonly maxLogBytes: number;
  private readonly log: (line: string) => void;

  constructor(private readonly options: SupervisorOptions) {
    validatePortRange(options.portRange);
    this.healthIntervalMs = options.healthIntervalMs ?? 1000;
    this.healthTimeoutMs = options.healthTimeoutMs ?? 2000;
    this.unhealthyAfter = options.unhealthyAfterFailures ?? 3;
    this.stopGraceSeconds = options.stopGraceSeconds ?? 10;
    this.unidentifiedGraceMs = options.unidentifiedGraceMs ?? 5000;
    this.workerReadyAfterMs = options.workerReadyAfterMs ?? 1000;
    this.maxLogBytes = options.maxLogBytes ?? 64 * 1024 * 1024;
    this.log = options.log ?? (() => {});
    this.changes.setMaxListeners(0);
    this.logTimer = setInterval(() => this.enforceLogLimits(), options.logCheckIntervalMs ?? 10_000);
    this.logTimer.unref();
  }

  get nodeId(): string {
    return this.options.nodeId;
  }

  // ---- recovery -------------------------------------------------------------------------

  /**
   * Runs once at agent start, before anything else: adopts the engines a previous agent left
   * running, reports those that died meanwhile, and kills marked processes nobody describes.
   */
  async recover(): Promise<RecoveryReport> {
    if (this.recovered) throw new Error('recover() runs once, when the agent starts');
    this.recovered = true;
    const { stateDir } = this.options;
    for (const name of removeStaleTempFiles(stateDir)) this.log(`removed ${name}: a spec write a crash interrupted`);
    const { records, unreadable } = readAllRecords(stateDir);
    for (const u of unreadable) {
      this.corrupt.set(u.shardId, u.error);
      this.log(`spec file ${u.file} cannot be read: ${u.error}`);
    }

    const marked = scanMarked(this.nodeId);
    const adopted: RunningShard[] = [];
    const exited: RunningShard[] = [];
    for (const record of records) {
      const outcome = this.recoverRecord(record, marked);
      const shard = this.shards.get(record.spec.shardId);
      if (!shard) continue;
      if (outcome === 'adopted') adopted.push(this.running(shard));
      else if (outcome === 'failed') exited.push(this.running(shard));
    }

    const unidentified = await this.killStrangers(marked);
    this.setAsideCorruptRecords(unreadable);
    return { adopted, exited, unidentified };
  }

  /** Finds and kills processes no spec describes (marked with this node id, or reported on our GPUs). */
  async findUnidentified(): Promise<UnidentifiedProcess[]> {
    return this.killStrangers(scanMarked(this.nodeId));
  }

  private recoverRecord(record: ShardRecord, marked: MarkedProcess[]): 'adopted' | 'failed' | 'not-started' {
    const id = record.spec.shardId;
    const verdict = judgeRecord(record, marked);
    const shard = this.newShard(record);
    this.shards.set(id, shard);
    switch (verdict.kind) {
      case 'not-started':
        shard.state = ShardState.PENDING;
        shard.message = 'spec recorded but no engine was started (the agent stopped before spawning it); startShard starts it';
        this.log(`shard ${id}: ${shard.message}`);
        return 'not-started';
      case 'failed':
        shard.procs = verdict.processes.map((p) => ({ ...p }));
        shard.adopted = true;
        shard.exited = true;
        shard.state = ShardState.FAILED;
        shard.message = verdict.message;
        shard.lastLogLines = tailLines(shard.logFile, LOG_TAIL_LINES);
        this.log(`shard ${id}: ${verdict.message}`);
        return 'failed';
      case 'alive': {
        shard.procs = verdict.processes.map((p) => ({ ...p }));
        shard.adopted = true;
        shard.state = record.launch.servesHttp ? ShardState.LOADING : ShardState.STARTING;
        shard.runningSince = Date.now();
        const now = new Date();
        record.processes = verdict.processes;
        record.adoptedAt = now.toISOString();
        try {
          writeRecordAtomic(this.options.stateDir, record);
        } catch (err) {
          // The engine is adopted all the same; only the adoption time is lost.
          this.log(`shard ${id}: could not rewrite its spec after adoption: ${errorText(err)}`);
        }
        const pid = mainProcess(shard)?.pid ?? 0;
        try {
          appendLogLine(shard.logFile, adoptionLine(this.nodeId, pid, now));
        } catch (err) {
          this.log(`shard ${id}: could not write to ${shard.logFile}: ${errorText(err)}`);
        }
        const found = verdict.foundUnrecorded
          ? ` (found pid ${verdict.foundUnrecorded.pid} by its markers: the previous agent died before recording it)`
          : '';
        this.log(`adopted shard ${id}: pid ${pid}${found}`);
        this.watch(shard);
        return 'adopted';
      }
      default: {
        const unknown: never = verdict;
        throw new Error(`unknown recovery verdict ${JSON.stringify(unknown)}`);
      }
    }
  }

  private async killStrangers(marked: MarkedProcess[]): Promise<UnidentifiedProcess[]> {
    const described = new Set(this.shards.keys());
    const strangers: Stranger[] = markedStrangers(marked, described, this.corrupt);
    if (this.options.extraUnidentified) {
      const ours = this.ourPids(marked);
      for (const s of strangers) ours.add(s.pid);
      try {
        strangers.push(...gpuStrangers(await this.options.extraUnidentified(), this.nodeId, described, ours, this.log));
      } catch (err) {
        this.log(`could not list the processes on this host's GPUs: ${errorText(err)}`);
      }
    }
    if (strangers.length === 0) return [];
    for (const s of strangers) this.unidentifiedSeen.set(s.pid, s.startTicks);

    const { survivors } = await terminate(
      strangers.map((s) => s.target),
      this.unidentifiedGraceMs,
    );
    const survived = new Set(survivors.map((t) => t.pid));
    return strangers.map((s) => {
      // A group target's members are ended with it; only a survivor of its own keeps killed false.
      const killed = !survived.has(s.pid) && !isSameProcess(s.pid, s.startTicks);
      const marker = s.shardId ? ` (LLMGW_SHARD_ID=${s.shardId})` : '';
      this.log(
        killed
          ? `killed pid ${s.pid}${marker}: ${s.reason}`
          : `could not kill pid ${s.pid}${marker} (${s.reason}): still alive after SIGKILL`,
      );
      return create(UnidentifiedProcessSchema, {
        pid: s.pid,
        reason: s.reason,
        gpuIndices: s.gpuIndices,
        command: s.command,
        killed,
      });
    });
  }

  /** Pids of the processes our shards consist of, including what their engines forked. */
  private ourPids(marked: MarkedProcess[]): Set<number> {
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

  private setAsideCorruptRecords(unreadable: UnreadableRecord[]): void {
    if (unreadable.length === 0) return;
    const stillMarked = new Set(scanMarked(this.nodeId).map((m) => m.shardId));
    for (const u of unreadable) {
      // Kept while something it may have described still runs: the next recovery tries again.
      if (stillMarked.has(u.shardId)) continue;
      try {
        const kept = setAsideCorrupt(u.file);
        this.log(`moved the unreadable spec file ${u.file} to ${kept}`);
      } catch (err) {
        this.log(`could not move the unreadable spec file ${u.file} aside: ${errorText(err)}`);
      }
    }
  }

  // ---- start ----------------------------------------------------------------------------

  /**
   * Starts one shard, idempotently: the same shard id with an equal spec while its processes
   * live returns the running shard and starts nothing. Returns once the processes are spawned
   * (Starting or Loading); waitHealthy says when the engine serves.
   */
  async start(requested: StartShard): Promise<RunningShard> {
    this.assertOpen();
    const id = requested.shardId;
    if (!isSafeShardId(id)) {
      throw ApplicationFailure.nonRetryable(
        `shard id ${JSON.stringify(id)} cannot name a spec file: use letters, digits, '.', '_' and '-', starting with a letter or digit`,
        FailureType.InvalidSpec,
      );
    }
    const spec = clone(StartShardSchema, requested);
    if (spec.nodeId === '') spec.nodeId = this.nodeId;
    if (spec.nodeId !== this.nodeId) {
      // The engine would carry another node's marker: that agent would kill it as a stranger.
      throw ApplicationFailure.nonRetryable(
        `shard ${id} is meant for node ${spec.nodeId}, but this agent is node ${this.nodeId}`,
        FailureType.InvalidSpec,
      );
    }
    return this.locks.run(id, () => this.startLocked(spec));
  }

  private async startLocked(spec: StartShard): Promise<RunningShard> {
    this.assertOpen();
    const id = spec.shardId;
    const existing = this.shards.get(id);
    if (existing) {
      const differences = specDifferences(existing.spec, existing.record.httpPort, spec);
      if (differences.length > 0) {
        throw ApplicationFailure.nonRetryable(
          `shard ${id} was already started with a different spec (${differences.join(', ')} differ); a changed spec needs a new shard id`,
          FailureType.SpecConflict,
          { shardId: id, differences },
        );
      }
      if (this.isRunning(existing)) return this.running(existing);
      await this.clearRemnants(existing);
    }

    checkStateDirWritable(this.options.stateDir);
    const port = await this.choosePort(spec, existing);
    if (spec.rank === 0 && spec.nnodes > 1 && spec.leaderPort === 0) {
      // Rank 0's host chooses the rendezvous port; the replica hands it to the other ranks.
      spec.leaderPort = await this.chooseRendezvousPort(spec, existing, port);
      if (spec.leaderAddress === '') spec.leaderAddress = this.options.advertiseAddress;
    }
    let launch: EngineLaunch;
    let shard: Shard;
    try {
      launch = buildEngineLaunch(spec, { ...this.options.engineContext, advertiseAddress: this.options.advertiseAddress, httpPort: port });
      for (const p of launch.processes) {
        if (!p.blocking) {
          throw ApplicationFailure.nonRetryable(
            `shard ${id}: the launch has a one-shot ${p.role} step, which this agent does not support`,
            FailureType.InvalidSpec,
          );
        }
      }
      const record: ShardRecord = {
        version: 1,
        spec,
        httpPort: port,
        launch: { roles: launch.processes.map((p) => p.role), servesHttp: launch.servesHttp, healthPath: launch.healthPath },
        processes: [],
        startedAt: new Date().toISOString(),
      };
      // Before any spawn: an agent that dies right after spawning must find the spec.
      writeRecordAtomic(this.options.stateDir, record);
      shard = this.newShard(record);
      this.shards.set(id, shard);
    } finally {
      this.reservedPorts.delete(port);
      if (spec.rank === 0 && spec.nnodes > 1) this.reservedPorts.delete(spec.leaderPort);
    }

    // What must wait for a Ray cluster (rank 0's engine) starts in the background: the other
    // ranks, whose Ray workers complete the cluster, are started only once this start returns.
    const waitAt = launch.processes.findIndex((p) => p.waitForRayNodes !== undefined);
    const now = waitAt < 0 ? launch.processes : launch.processes.slice(0, waitAt);
    const later = waitAt < 0 ? [] : launch.processes.slice(waitAt);
    try {
      for (const p of now) {
        this.throwIfStartCut(shard);
        await this.options.beforeSpawn?.({ shardId: id, recordFile: recordPath(this.options.stateDir, id), process: p });
        this.throwIfStartCut(shard);
        await this.spawnProcess(shard, p);
      }
      this.throwIfStartCut(shard);
      await this.options.afterSpawn?.({ shardId: id });
    } catch (err) {
      if (!shard.exited && !shard.stopping) {
        this.markExited(shard, { message: `start failed: ${errorText(err)}` });
      }
      throw err;
    }

    shard.state = later.length === 0 && launch.servesHttp ? ShardState.LOADING : ShardState.STARTING;
    shard.runningSince = Date.now();
    if (later.length)
      shard.message = `waiting for ${later[0]!.waitForRayNodes} Ray node(s) before starting the ${later.map((p) => p.role).join(', ')}`;
    this.log(
      `started shard ${id}: ${shard.procs.map((p) => `${p.role} pid ${p.pid}`).join(', ')}${port ? ` on port ${port}` : ''}${later.length ? `; ${shard.message}` : ''}`,
    );
    this.emitChange(id);
    this.watch(shard);
    if (later.length) void this.startAfterRay(shard, later, launch.servesHttp);
    return this.running(shard);
  }

  /**
   * The rest of a Ray launch: waits for the cluster, then spawns under the shard's lock, so
   * that a stop either comes first (and nothing is spawned) or after (and ends it too).
   * A failure ends the shard as exited, which waitHealthy and the replica see.
   */
  private async startAfterRay(shard: Shard, processes: ProcessSpec[], servesHttp: boolean): Promise<void> {
    const id = shard.spec.shardId;
    try {
      for (const p of processes) {
        if (p.waitForRayNodes !== undefined) await this.waitForRay(shard, p);
        await this.locks.run(id, async () => {
          this.throwIfStartCut(shard);
          if (shard.stopping || this.shards.get(id) !== shard) throw new Error('the shard was stopped');
          await this.options.beforeSpawn?.({ shardId: id, recordFile: recordPath(this.options.stateDir, id), process: p });
          await this.spawnProcess(shard, p);
        });
      }
      if (shard.exited || shard.stopping) return;
      shard.message = '';
      if (servesHttp && shard.state === ShardState.STARTING) shard.state = ShardState.LOADING;
      this.log(
        `started the ${processes.map((p) => p.role).join(', ')} of shard ${id}: ${shard.procs.map((p) => `${p.role} pid ${p.pid}`).join(', ')}`,
      );
      this.emitChange(id);
    } catch (err) {
      if (shard.exited || shard.stopping || this.shards.get(id) !== shard) return;
      this.markExited(shard, { message: `start failed: ${errorText(err)}` });
      this.log(`shard ${id}: ${shard.message}`);
      this.transitioned(shard);
    }
  }

  private throwIfStartCut(shard: Shard): void {
    if (shard.startAbort.signal.aborted) {
      throw ApplicationFailure.retryable(`shard ${shard.spec.shardId}: start abandoned: ${errorText(shard.startAbort.signal.reason)}`);
    }
    if (shard.exited) {
      throw ApplicationFailure.nonRetryable(`shard ${shard.spec.shardId}: ${shard.message}`, FailureType.EngineExited, exitDetails(shard));
    }
  }

  private async waitForRay(shard: Shard, p: ProcessSpec): Promise<void> {
    const spec = shard.spec;
    // The Ray wait (`ray status` until every node has joined) is the agent's, passed in as
    // options.waitForRay; the supervisor only sequences it between the head and the engine.
    if (!this.options.waitForRay) {
      throw ApplicationFailure.nonRetryable(
        `shard ${spec.shardId}: its ${p.role} must wait for ${p.waitForRayNodes} Ray node(s), but this agent was started without a Ray wait`,
        FailureType.InvalidSpec,
      );
    }
    this.log(
      `shard ${spec.shardId}: waiting for ${p.waitForRayNodes} Ray node(s) at ${p.rayAddress ?? '(unknown address)'} before starting the ${p.role}`,
    );
    // The Ray head started just before may die while the wait polls: end the wait then, and
    // report the exit, rather than poll a cluster that is gone until the startup timeout.
    const wait = new AbortController();
    const onStop = (): void => wait.abort(shard.startAbort.signal.reason);
    const onChange = (id: string): void => {
      if (id === spec.shardId && shard.exited) wait.abort(new Error(shard.message));
    };
    shard.startAbort.signal.addEventListener('abort', onStop, { once: true });
    this.changes.on('change', onChange);
    try {
      if (shard.startAbort.signal.aborted) onStop();
      if (shard.exited) wait.abort(new Error(shard.message));
      await this.options.waitForRay(spec, p, wait.signal);
    } catch (err) {
      this.throwIfStartCut(shard);
      throw err;
    } finally {
      shard.startAbort.signal.removeEventListener('abort', onStop);
      this.changes.off('change', onChange);
    }
  }

  /** The port the agent gives the engine: the request's, or the first free one in its range. */
  private async choosePort(spec: StartShard, existing: Shard | undefined): Promise<number> {
    if (spec.httpPort !== 0) return spec.httpPort;
    // Only rank 0 serves HTTP; worker ranks get no port.
    if (spec.rank !== 0) return 0;
    return this.locks.run(PORT_LOCK, async () => {
      const inUse = new Set<number>(this.reservedPorts);
      for (const s of this.shards.values()) if (s !== existing && s.record.httpPort > 0) inUse.add(s.record.httpPort);
      // Engines of other agents on this host that were given a port but may not bind it yet.
      for (const p of portsMarkedOnHost()) inUse.add(p);
      // A restart keeps its port when it can: clients and logs stay easy to follow.
      const previous = existing?.record.httpPort ?? 0;
      if (previous > 0) inUse.delete(previous);
      const range = previous > 0 ? { from: previous, to: previous } : this.options.portRange;
      const owner = `${this.nodeId}/${spec.shardId}`;
      let port: number;
      try {
        port = await allocatePort(range, inUse, this.options.advertiseAddress, this.log);
        if (previous <= 0 && !claimPort(port, owner)) throw new Error('claimed by another agent');
      } catch {
        if (previous > 0) inUse.add(previous);
        // Skip ports another agent on this host has just claimed (bounded by the range size).
        for (let tries = this.options.portRange.to - this.options.portRange.from + 1; ; tries--) {
          port = await allocatePort(this.options.portRange, inUse, this.options.advertiseAddress, this.log);
          if (claimPort(port, owner) || tries <= 0) break;
          inUse.add(port);
        }
      }
      this.reservedPorts.add(port);
      return port;
    });
  }

  /** A second port of the agent's range for rank 0's rendezvous, kept across restarts when free. */
  private async chooseRendezvousPort(spec: StartShard, existing: Shard | undefined, httpPort: number): Promise<number> {
    return this.locks.run(PORT_LOCK, async () => {
      const inUse = new Set<number>([...this.reservedPorts, httpPort, ...portsMarkedOnHost()]);
      for (const s of this.shards.values()) {
        if (s === existing) continue;
        if (s.record.httpPort > 0) inUse.add(s.record.httpPort);
        if (s.spec.leaderPort > 0 && s.spec.rank === 0) inUse.add(s.spec.leaderPort);
      }
      const previous = existing?.spec.leaderPort ?? 0;
      const owner = `${this.nodeId}/${spec.shardId}/rendezvous`;
      for (let tries = this.options.portRange.to - this.options.portRange.from + 1; tries > 0; tries--) {
        const range = previous > 0 && !inUse.has(previous) ? { from: previous, to: previous } : this.options.portRange;
        let port: number;
        try {
          port = await allocatePort(range, inUse, this.options.advertiseAddress, this.log);
        } catch {
          inUse.add(previous);
          continue;
        }
        if (port === previous || claimPort(port, owner)) {
          this.reservedPorts.add(port);
          return port;
        }
        inUse.add(port);
      }
      throw ApplicationFailure.nonRetryable(
        `shard ${spec.shardId}: no free port in ${this.options.portRange.from}-${this.options.portRange.to} for the rendezvous of its ${spec.nnodes} ranks`,
        FailureType.NoFreePort,
      );
    });
  }

  private async spawnProcess(shard: Shard, p: ProcessSpec): Promise<void> {
    const id = shard.spec.shardId;
    const [program, ...args] = p.argv;
    if (program === undefined)
      throw ApplicationFailure.nonRetryable(`shard ${id}: the ${p.role} has an empty command`, FailureType.InvalidSpec);
    const env = this.processEnv(p, shard.record.httpPort);
    appendLogLine(
      shard.logFile,
      `--- llmgw agent ${this.nodeId} starting the ${p.role} of shard ${id} at ${new Date().toISOString()}: ${p.argv.join(' ')} ---`,
    );
    const fd = openLogForChild(shard.logFile);
    let child: ChildProcess;
    try {
      // Own process group (detached), no shell, output straight into the log file.
      child = spawn(program, args, { detached: true, stdio: ['ignore', fd, fd], env });
    } finally {
      closeSync(fd);
    }
    child.on('error', (err) => this.log(`shard ${id}: ${p.role}: ${err.message}`));
    const pid = child.pid;
    if (pid === undefined) {
      const err = await new Promise<Error>((resolve) => child.once('error', resolve));
      throw ApplicationFailure.nonRetryable(
        `shard ${id}: could not start the ${p.role} (${program}): ${err.message}`,
        FailureType.EngineExited,
      );
    }
    const proc: ShardProcess = { role: p.role, pid, startTicks: readStartTicks(pid) ?? '', pgid: pid, child };
    proc.exited = new Promise<void>((resolve) => {
      child.once('exit', (code, signal) => {
        proc.exit = { code, signal };
        resolve();
        this.onChildExit(shard, proc);
      });
    });
    // The agent must be able to exit (or die) while its engines run on.
    child.unref();
    shard.procs.push(proc);
    shard.record.processes.push({ role: proc.role, pid, startTicks: proc.startTicks, pgid: proc.pgid });
    writeRecordAtomic(this.options.stateDir, shard.record);
  }

  private processEnv(p: ProcessSpec, port: number): Record<string, string> {
    const env: Record<string, string> = {};
    for (const name of [...BASE_ENV, ...(this.options.passEnv ?? [])]) {
      const value = process.env[name];
      if (value !== undefined) env[name] = value;
    }
    Object.assign(env, p.env);
    if (port > 0) env[PORT_MARKER_ENV] = String(port);
    return env;
  }

  private isRunning(shard: Shard): boolean {
    if (shard.exited || shard.procs.length === 0 || shard.procs.length < shard.record.launch.roles.length) return false;
    return shard.procs.every((p) => p.exit === undefined && isSameProcess(p.pid, p.startTicks));
  }

  /** Before a dead shard is started again: whatever its engine forked must not hold the GPUs. */
  private async clearRemnants(shard: Shard): Promise<void> {
    shard.stopping = true;
    this.clearTimer(shard);
    const targets = this.stopTargets(shard);
    if (targets.length === 0) return;
    this.log(`shard ${shard.spec.shardId}: ending what is left of its previous start before starting it again`);
    const { survivors } = await terminate(targets, 0);
    if (survivors.length > 0) {
      throw ApplicationFailure.retryable(
        `shard ${shard.spec.shardId}: pid(s) ${survivors.map((t) => t.pid).join(', ')} of its previous start survive SIGKILL`,
      );
    }
  }

  // ---- exits and health -----------------------------------------------------------------

  private onChildExit(shard: Shard, proc: ShardProcess): void {
    const exit: ProcessExit = proc.exit ?? { code: null, signal: null };
    if (this.closed || this.shards.get(shard.spec.shardId) !== shard) return;
    const what = describeExit(proc.role, proc.pid, exit);
    if (shard.stopping) {
      this.log(`shard ${shard.spec.shardId}: ${what} (stopping)`);
      return;
    }
    if (shard.exited) return;
    this.markExited(shard, { message: what, exit });
    this.log(`shard ${shard.spec.shardId}: ${what}`);
    this.transitioned(shard);
  }

  private markExited(shard: Shard, how: { message: string; exit?: ProcessExit }): void {
    shard.exited = true;
    shard.state = ShardState.FAILED;
    shard.message = how.message;
    if (how.exit?.code !== undefined && how.exit.code !== null) shard.exitCode = how.exit.code;
    shard.signal = how.exit?.signal ?? '';
    shard.lastLogLines = tailLines(shard.logFile, LOG_TAIL_LINES);
    this.clearTimer(shard);
    this.emitChange(shard.spec.shardId);
  }

  private watch(shard: Shard): void {
    this.scheduleTick(shard, 0);
  }

  private scheduleTick(shard: Shard, delayMs: number): void {
    this.clearTimer(shard);
    shard.timer = setTimeout(() => void this.tick(shard), delayMs);
    shard.timer.unref();
  }

  private clearTimer(shard: Shard): void {
    if (shard.timer) clearTimeout(shard.timer);
    shard.timer = undefined;
  }

  private watching(shard: Shard): boolean {
    return !this.closed && !shard.exited && !shard.stopping && this.shards.get(shard.spec.shardId) === shard;
  }

  private async tick(shard: Shard): Promise<void> {
    shard.timer = undefined;
    if (!this.watching(shard)) return;
    // Adopted engines are not our children, so they cannot be waited on: watch by polling.
    if (shard.adopted) {
      const gone = shard.procs.find((p) => !isSameProcess(p.pid, p.startTicks));
      if (gone) {
        this.markExited(shard, {
          message: `${gone.role} (pid ${gone.pid}) exited; its exit code is unknown because a previous agent started it`,
        });
        this.log(`shard ${shard.spec.shardId}: ${shard.message}`);
        this.transitioned(shard);
        return;
      }
    }
    if (shard.record.launch.servesHttp) {
      const result = await probeHealth(this.healthUrl(shard), this.healthTimeoutMs);
      if (!this.watching(shard)) return;
      this.applyProbe(shard, result);
    } else if (shard.state !== ShardState.READY && Date.now() - (shard.runningSince ?? 0) >= this.workerReadyAfterMs) {
      // A worker rank serves nothing we could probe; the engine itself joins the leader, and
      // the leader's health (rank 0) is what says the replica works.
      this.setState(shard, ShardState.READY, 'worker rank running; it joins the leader itself');
    }
    // While an engine loads, look more often: the moment it is healthy is the moment the
    // replica becomes routable. Once Ready, the steady interval is enough.
    const loading = shard.state !== ShardState.READY;
    if (this.watching(shard)) this.scheduleTick(shard, loading ? Math.min(200, this.healthIntervalMs) : this.healthIntervalMs);
  }

  private healthUrl(shard: Shard): string {
    const host = probeHost(this.options.advertiseAddress);
    return `http://${hostPort(host, shard.record.httpPort)}${shard.record.launch.healthPath}`;
  }

  private applyProbe(shard: Shard, result: ProbeResult): void {
    if (result.ok) {
      shard.healthFailures = 0;
      if (shard.state !== ShardState.READY)
        this.setState(shard, ShardState.READY, `healthy: ${shard.record.launch.healthPath} answered 200`);
      return;
    }
    switch (shard.state) {
      case ShardState.READY:
        shard.healthFailures += 1;
        if (shard.healthFailures >= this.unhealthyAfter) {
          // The process is alive; whether to replace it is the replica workflow's call.
          this.setState(shard, ShardState.FAILED, `health check failing: ${result.error}`);
        }
        return;
      case ShardState.FAILED:
        shard.healthFailures += 1;
        return;
      default:
        // Still loading: a refused connection or a 503 is what loading looks like.
        return;
    }
  }

  private setState(shard: Shard, state: ShardState, message: string): void {
    if (shard.state === state) return;
    shard.state = state;
    shard.message = message;
    shard.lastLogLines = state === ShardState.FAILED ? tailLines(shard.logFile, LOG_TAIL_LINES) : [];
    this.log(`shard ${shard.spec.shardId}: ${ShardState[state]}: ${message}`);
    this.emitChange(shard.spec.shardId);
    this.transitioned(shard);
  }

  private transitioned(shard: Shard): void {
    if (!this.options.onTransition) return;
    try {
      this.options.onTransition(this.statusOf(shard));
    } catch (err) {
      this.log(`onTransition for shard ${shard.spec.shardId} threw: ${errorText(err)}`);
    }
  }

  private emitChange(shardId: string): void {
    this.changes.emit('change', shardId);
  }

  // ---- waitHealthy ----------------------------------------------------------------------

  /**
   * Resolves with the Ready status. Rejects with EngineExited (exit status and last log lines
   * in message and details) if the engine exits first, StartupTimeout after `timeoutSeconds`
   * (0: the spec's startup timeout) — killing nothing, the caller decides — or with the
   * signal's reason when aborted.
   */
  waitHealthy(shardId: string, timeoutSeconds: number, opts: WaitHealthyOptions = {}): Promise<ShardStatus> {
    return waitUntilReady(
      {
        nodeId: this.nodeId,
        shard: (id) => this.shards.get(id),
        closed: () => this.closed,
        onChange: (listener) => {
          this.changes.on('change', listener);
          return () => this.changes.off('change', listener);
        },
        status: (shard) => this.statusOf(shard),
        heartbeatEveryMs: Math.max(1000, this.healthIntervalMs),
      },
      shardId,
      timeoutSeconds,
      opts,
    );
  }

  // ---- stop -----------------------------------------------------------------------------

  /**
   * SIGTERM to the shard's process groups, SIGKILL after the grace period; the spec record is
   * removed only once every process is gone. Stopping an unknown shard is not an error.
   */
  async stop(req: StopShard): Promise<StopShardResult> {
    const id = req.shardId;
    if (!isSafeShardId(id)) {
      throw ApplicationFailure.nonRetryable(`shard id ${JSON.stringify(id)} cannot name a shard`, FailureType.InvalidInput);
    }
    // A start still waiting (for Ray) gives up rather than hold the lock through the stop.
    this.shards.get(id)?.startAbort.abort(new Error(`stop requested${req.reason ? `: ${req.reason}` : ''}`));
    return this.locks.run(id, () => this.stopLocked(req));
  }

  private async stopLocked(req: StopShard): Promise<StopShardResult> {
    const id = req.shardId;
    const graceMs = (req.graceSeconds || this.stopGraceSeconds) * 1000;
    const shard = this.shards.get(id);
    if (!shard) {
      // Nothing recorded; marked leftovers of this id are still ours to end.
      const strays: KillTarget[] = scanMarked(this.nodeId)
        .filter((m) => m.shardId === id)
        .map((m) => ({ pid: m.pid, startTicks: m.startTicks, group: false }));
      if (strays.length > 0) await terminate(strays, graceMs);
      return create(StopShardResultSchema, { shardId: id, wasRunning: strays.length > 0 });
    }

    shard.stopping = true;
    this.clearTimer(shard);
    const targets = this.stopTargets(shard);
    const wasRunning = targets.some(targetAlive);
    if (wasRunning) this.log(`stopping shard ${id}${req.reason ? ` (${req.reason})` : ''}: SIGTERM, SIGKILL after ${graceMs / 1000} s`);
    const { survivors, finalSignal } = await terminate(targets, graceMs);
    if (survivors.length > 0) {
      throw ApplicationFailure.retryable(
        `shard ${id}: pid(s) ${survivors.map((t) => t.pid).join(', ')} still alive after SIGKILL (stuck in the kernel?); its spec is kept until they are gone`,
      );
    }
    // Our own children's exit statuses arrive once libuv has reaped them.
    await Promise.race([Promise.all(shard.procs.map((p) => p.exited ?? Promise.resolve())), sleep(1000)]);

    removeRecord(this.options.stateDir, id);
    this.shards.delete(id);
    this.emitChange(id);

    const result = create(StopShardResultSchema, { shardId: id, wasRunning });
    const exit = mainProcess(shard)?.exit;
    if (exit) {
      if (exit.code !== null) result.exitCode = exit.code;
      result.signal = exit.signal ?? '';
    } else if (shard.exitCode !== undefined || shard.signal !== '') {
      if (shard.exitCode !== undefined) result.exitCode = shard.exitCode;
      result.signal = shard.signal;
    } else if (wasRunning) {
      // An adopted engine's exit status went to its real parent; say what ended it.
      result.signal = finalSignal;
    }
    this.log(`stopped shard ${id}${wasRunning ? '' : ' (nothing was running)'}`);
    return result;
  }

  /**
   * The shard's live process groups (each spawned process leads one), and any process marked
   * with this shard that escaped them (a helper that called setsid).
   */
  private stopTargets(shard: Shard): KillTarget[] {
    const targets: KillTarget[] = [];
    const groups = new Set<number>();
    for (const p of [...shard.procs].reverse()) {
      if (!isSameProcess(p.pid, p.startTicks)) continue;
      targets.push({ pid: p.pgid, startTicks: p.startTicks, group: true });
      groups.add(p.pgid);
    }
    for (const m of scanMarked(this.nodeId)) {
      if (m.shardId !== shard.spec.shardId || groups.has(m.pgrp)) continue;
      targets.push({ pid: m.pid, startTicks: m.startTicks, group: false });
    }
    return targets;
  }

  // ---- kill -----------------------------------------------------------------------------

  /**
   * Kills processes the control plane judged unidentifiable. Only processes marked with this
   * node id (and no shard we describe) or found unidentified earlier are ours to kill; our
   * shards' own processes are refused (stopShard ends those), and so is everything else.
   */
  async kill(pids: number[], reason: string): Promise<KillProcessesResult> {
    const result = create(KillProcessesResultSchema, {});
    const skip = selfAndAncestors();
    const marked = scanMarked(this.nodeId);
    const ours = this.ourPids(marked);
    const markedByPid = new Map(marked.map((m) => [m.pid, m]));
    const targets: KillTarget[] = [];
    for (const pid of pids) {
      const stat = readStat(pid);
      if (!stat || !isAlive(pid)) {
        result.alreadyGone.push(pid);
        continue;
      }
      const m = markedByPid.get(pid);
      const seen = this.unidentifiedSeen.get(pid) === stat.startTicks;
      if (skip.has(pid) || ours.has(pid)) {
        this.log(
          `refused to kill pid ${pid} (${reason}): it is ${skip.has(pid) ? 'this agent' : 'part of a shard this agent runs; stop the shard instead'}`,
        );
        result.refused.push(pid);
      } else if ((m && !this.shards.has(m.shardId)) || seen) {
        targets.push({ pid, startTicks: stat.startTicks, group: false });
      } else {
        this.log(`refused to kill pid ${pid} (${reason}): it carries no marker of agent ${this.nodeId}`);
        result.refused.push(pid);
      }
    }
    const { survivors } = await terminate(targets, this.unidentifiedGraceMs);
    const survived = new Set(survivors.map((t) => t.pid));
    for (const t of targets) {
      if (survived.has(t.pid)) {
        this.log(`could not kill pid ${t.pid} (${reason}): still alive after SIGKILL`);
        result.refused.push(t.pid);
      } else {
        this.log(`killed pid ${t.pid}: ${reason}`);
        result.killed.push(t.pid);
      }
    }
    return result;
  }

  // ---- views and lifecycle --------------------------------------------------------------

  list(): RunningShard[] {
    return [...this.shards.values()].map((s) => this.running(s));
  }

  status(shardId: string): ShardStatus | undefined {
    const shard = this.shards.get(shardId);
    return shard ? this.statusOf(shard) : undefined;
  }

  logFile(shardId: string): string {
    return logPath(this.options.stateDir, shardId);
  }

  /** Stops timers and watching. Does NOT stop engines: they outlive the agent. */
  close(): void {
    this.closed = true;
    clearInterval(this.logTimer);
    for (const shard of this.shards.values()) {
      this.clearTimer(shard);
      shard.startAbort.abort(new Error('the agent is shutting down'));
      // Pending waitHealthy calls see `closed` and give up.
      this.emitChange(shard.spec.shardId);
    }
    this.changes.removeAllListeners();
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('the supervisor is closed');
  }

  private enforceLogLimits(): void {
    for (const shard of this.shards.values()) {
      try {
        if (enforceLogLimit(shard.logFile, this.maxLogBytes))
          this.log(`shard ${shard.spec.shardId}: log over ${this.maxLogBytes} bytes; kept the previous part as ${shard.logFile}.1`);
      } catch (err) {
        this.log(`shard ${shard.spec.shardId}: could not bound its log: ${errorText(err)}`);
      }
    }
  }

  private newShard(record: ShardRecord): Shard {
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

  private statusOf(shard: Shard): ShardStatus {
    return shardStatus(shard, this.nodeId, this.options.advertiseAddress);
  }

  private running(shard: Shard): RunningShard {
    return runningShard(shard, this.nodeId, this.options.advertiseAddress);
  }
}

export function createSupervisor(options: SupervisorOptions): Supervisor {
  return new Supervisor(options);
}

export { EXITED_WHILE_DOWN };
export type { WaitHealthyOptions };
