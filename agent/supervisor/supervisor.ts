// The agent's engine supervisor: spawns, watches, stops and (after an agent restart) adopts
// the engine processes on one host. Agent side. Engines outlive the agent: each runs in its
// own process group, writes straight to its log file, and is described by a spec record
// written before it was spawned, so a `kill -9` of the agent leaves them serving and the
// next agent takes them over instead of starting new ones.
//
// This class is the front door; the work is done in one room per concern, beside the state
// every room shares (core.ts, shard.ts, options.ts, lock.ts, and spec-store.ts: the state dir):
//   recovery/   adoption of what a previous agent left running (once, at start), and the
//               processes no spec describes (unidentified.ts, strangers.ts)
//   start/      starting a shard: the checks, the ports it gets (claims included), the part
//               that waits for a Ray cluster, whether a repeated start is the same spec, and
//               the rendezvous ports the firewall opens to the placement's peers only
//   watch/      exits, health probes and the transitions they cause; waiting for Ready
//   stop/       stopping a shard, and ending process groups
//   logs/       engine log files, their size and the retention of stopped shards' files
//   processes/  the process boundary (spawn, pids, exits, signals, /proc, engine markers)
import type { ForeignProcess, KillProcessesResult } from '../../proto/gen/llmgw/v1/register_pb.js';
import type { RunningShard, ShardStatus, StartShard, StopShard, StopShardResult } from '../../proto/gen/llmgw/v1/shard_pb.js';
import { EXITED_WHILE_DOWN } from './recovery/adopt.js';
import { errorText, SupervisorCore } from './core.js';
import { childProcessLauncher } from './processes/launcher.js';
import { enforceLogLimits, every, sweepOldFiles } from './logs/log-upkeep.js';
import { resolveOptions, type SupervisorOptions } from './options.js';
import { validatePortRange } from './start/ports.js';
import { recover, type RecoveryReport } from './recovery/recovery.js';
import { logPath } from './spec-store.js';
import { followShardChanges, syncRendezvous } from './start/rendezvous.js';
import { start } from './start/start.js';
import { stop } from './stop/stop.js';
import type { GpuProcess } from './recovery/strangers.js';
import { foreignNow, killOnRequest, survey, type SurveyReport } from './recovery/unidentified.js';
import { waitUntilReady, type WaitHealthyOptions } from './watch/wait-healthy.js';
import { clearTimer } from './watch/watch.js';
import { probeHost } from './watch/health.js';
import { hostPort } from '../engines/plan.js';
import { shardEngineKey } from './start/engine-key.js';
import { readEngineKey } from '../engine-identity.js';

/** What the agent needs to call one of its engines' own endpoints. */
export interface EngineAccess {
  spec: StartShard;
  /** scheme://host:port, no path. */
  baseUrl: string;
  /** The certificate pin of an engine started with --engine-tls. */
  pin?: string;
  /** The engine's API key for this run (sent as a bearer token), when the agent gives engines one. */
  key?: string;
}

export class Supervisor {
  private readonly core: SupervisorCore;
  private readonly stopTimers: (() => void)[];

  constructor(options: SupervisorOptions) {
    validatePortRange(options.portRange);
    this.core = new SupervisorCore(resolveOptions(options, childProcessLauncher));
    const { logCheckIntervalMs, retentionCheckIntervalMs } = this.core.options;
    this.stopTimers = [
      every(logCheckIntervalMs, () => enforceLogLimits(this.core)),
      every(retentionCheckIntervalMs, () => sweepOldFiles(this.core)),
    ];
    followShardChanges(this.core);
  }

  get nodeId(): string {
    return this.core.nodeId;
  }

  /**
   * Runs once at agent start, before anything else: adopts the engines a previous agent left
   * running, reports those that died meanwhile, kills marked processes nobody describes, and
   * sorts out the compute processes on our GPUs (`gpuProcesses`, from discovery) that are not ours.
   */
  async recover(gpuProcesses: GpuProcess[] = []): Promise<RecoveryReport> {
    const report = await recover(this.core, gpuProcesses);
    // The rules of adopted shards, and none of what a previous agent left for shards now gone.
    await syncRendezvous(this.core).catch((err: unknown) => this.core.log(`rendezvous firewall: ${errorText(err)}`, 'error'));
    // Only now are the shards known whose files must stay.
    await sweepOldFiles(this.core);
    return report;
  }

  /** Deletes the files of stopped shards older than the retention now (the timer's work); returns them. */
  sweepOldFiles(now = Date.now()): Promise<string[]> {
    return sweepOldFiles(this.core, now);
  }

  /**
   * Reconciliation's look at what no spec describes: kills the strangers marked as ours, and
   * reports (or, with `--foreign-gpu-processes kill`, kills) foreign processes on our GPUs.
   * In dry-run nothing is killed and the report says what act mode would do.
   */
  survey(gpuProcesses: GpuProcess[] = []): Promise<SurveyReport> {
    return survey(this.core, gpuProcesses);
  }

  /** The foreign processes on our GPUs now (for a registration); kills nothing. */
  foreignProcesses(gpuProcesses: GpuProcess[]): ForeignProcess[] {
    return foreignNow(this.core, gpuProcesses);
  }

  /**
   * Starts one shard, idempotently: the same shard id with an equal spec while its processes
   * live returns the running shard and starts nothing. Returns once the processes are spawned
   * (Starting or Loading); waitHealthy says when the engine serves.
   */
  start(requested: StartShard): Promise<RunningShard> {
    return start(this.core, requested);
  }

  /**
   * Resolves with the Ready status. Rejects with EngineExited (exit status and last log lines
   * in message and details) if the engine exits first, StartupTimeout after `timeoutSeconds`
   * (0: the spec's startup timeout) — killing nothing, the caller decides — or with the
   * signal's reason when aborted.
   */
  waitHealthy(shardId: string, timeoutSeconds: number, opts: WaitHealthyOptions = {}): Promise<ShardStatus> {
    const core = this.core;
    return waitUntilReady(
      {
        nodeId: core.nodeId,
        shard: (id) => core.shards.get(id),
        closed: () => core.closed,
        onChange: (listener) => {
          core.changes.on('change', listener);
          return () => core.changes.off('change', listener);
        },
        status: (shard) => core.statusOf(shard),
        heartbeatEveryMs: Math.max(1000, core.options.healthIntervalMs),
      },
      shardId,
      timeoutSeconds,
      opts,
    );
  }

  /**
   * SIGTERM to the shard's process groups, SIGKILL after the grace period; the spec record is
   * removed only once every process is gone. Stopping an unknown shard is not an error.
   */
  stop(req: StopShard): Promise<StopShardResult> {
    return stop(this.core, req);
  }

  /**
   * Kills processes the control plane judged unidentifiable. Only processes marked with this
   * node id (and no shard we describe) or found unidentified earlier are ours to kill; our
   * shards' own processes are refused (stopShard ends those), and so is everything else.
   */
  kill(pids: number[], reason: string): Promise<KillProcessesResult> {
    return killOnRequest(this.core, pids, reason);
  }

  list(): RunningShard[] {
    return [...this.core.shards.values()].map((s) => this.core.running(s));
  }

  status(shardId: string): ShardStatus | undefined {
    const shard = this.core.shards.get(shardId);
    return shard ? this.core.statusOf(shard) : undefined;
  }

  /** The pin of the certificate the shard's engine serves HTTPS with (--engine-tls); undefined: plain HTTP. */
  tlsFingerprint(shardId: string): string | undefined {
    return this.core.shards.get(shardId)?.record.tlsFingerprint;
  }

  /**
   * How the agent itself reaches a shard's engine (its sleep calls: agent/sleep.ts): the base URL
   * it probes, the TLS pin of the certificate it issued, the run's engine key. Undefined: unknown shard.
   */
  engineAccess(shardId: string): EngineAccess | undefined {
    const shard = this.core.shards.get(shardId);
    if (!shard || !shard.record.launch.servesHttp) return undefined;
    const pin = shard.record.tlsFingerprint;
    const host = probeHost(this.core.options.advertiseAddress);
    const keyFile = this.core.options.engineKeyFile;
    return {
      spec: shard.spec,
      baseUrl: `${pin === undefined ? 'http' : 'https'}://${hostPort(host, shard.record.httpPort)}`,
      ...(pin !== undefined ? { pin } : {}),
      ...(keyFile !== undefined ? { key: shardEngineKey(shard.spec, readEngineKey(keyFile)) } : {}),
    };
  }

  logFile(shardId: string): string {
    return logPath(this.core.options.stateDir, shardId);
  }

  /** Stops timers and watching. Does NOT stop engines: they outlive the agent. */
  close(): void {
    const core = this.core;
    core.closed = true;
    for (const stopTimer of this.stopTimers) stopTimer();
    for (const shard of core.shards.values()) {
      clearTimer(shard);
      shard.startAbort.abort(new Error('the agent is shutting down'));
      // Pending waitHealthy calls see `closed` and give up.
      core.emitChange(shard.spec.shardId);
    }
    core.changes.removeAllListeners();
  }
}

export function createSupervisor(options: SupervisorOptions): Supervisor {
  return new Supervisor(options);
}

export { EXITED_WHILE_DOWN };
export type { RecoveryReport, SupervisorOptions, SurveyReport, WaitHealthyOptions };
