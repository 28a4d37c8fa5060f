// The engine supervisor's settings, and their defaults in one place. Agent side.
import type { LineLog } from '../../common/logger.js';
import type { ShardStatus, StartShard } from '../../proto/gen/llmgw/v1/shard_pb.js';
import type { EngineContext, ProcessSpec } from '../engines/index.js';
import type { Launcher } from './processes/launcher.js';
import type { PortRange } from './start/ports.js';

export type ForeignGpuProcessMode = 'report' | 'kill';

/** Why a process was killed: ours and undescribed, foreign (kill mode), or asked by reconciliation. */
export type KillReason = 'unidentified' | 'foreign' | 'control-plane';

export type SupervisorEvent =
  { kind: 'kill'; reason: KillReason } | { kind: 'adopt' } | { kind: 'start'; restart: boolean } | { kind: 'exit' };

export interface SupervisorOptions {
  nodeId: string;
  stateDir: string;
  /** The agent's own engine port range, inclusive. */
  portRange: PortRange;
  /**
   * Where port claims are kept (start/ports.ts): default `<stateDir>/port-claims`. Agents that
   * share a host and port ranges share one directory of their own user (`llmgw up` does).
   */
  portClaimsDir?: string;
  /**
   * GPU indices this agent may hand out (its --managed-gpus, else every GPU discovery found): a
   * start naming any other is refused (start-checks.ts). Absent: not checked (unit tests).
   */
  managedGpus?: number[];
  /** Where engines bind and are reached (by the router, other ranks, and our health probes). */
  advertiseAddress: string;
  /** How to invoke each engine here; the supervisor fills in the address and the chosen port. */
  engineContext: Omit<EngineContext, 'httpPort' | 'advertiseAddress'>;
  /** How engine processes are started, signalled and seen (default: real child processes and /proc). */
  launcher?: Launcher;
  healthIntervalMs?: number;
  healthTimeoutMs?: number;
  /** Consecutive failed probes after which a Ready engine is reported unhealthy. */
  unhealthyAfterFailures?: number;
  stopGraceSeconds?: number;
  /** SIGTERM-to-SIGKILL grace for processes nobody describes. */
  unidentifiedGraceMs?: number;
  /** A worker rank (no HTTP) is Ready once its process has been up this long. */
  workerReadyAfterMs?: number;
  /** A running shard's log is cut (copy-truncate to `<log>.1`) beyond this size. */
  maxLogBytes?: number;
  logCheckIntervalMs?: number;
  /** Logs and corrupt specs of shards no longer run are deleted once this old (default 7 days). */
  logRetentionMs?: number;
  retentionCheckIntervalMs?: number;
  /** Variables of the agent's own environment that engines also get (besides PATH, HOME, LANG, …). */
  passEnv?: string[];
  /** NAME=value lines an engine's profile may reference ({fromHost: NAME}); read at every spawn. */
  envFile?: string;
  /** The unprivileged user engines run as (agent/engine-identity.ts); absent: the agent's own. */
  engineUser?: import('../engine-identity.js').EngineUser;
  /**
   * With engineUser: each shard runs as a uid of its own from this range (its group stays the
   * engine user's), recorded with its spec (supervisor/start/engine-uid.ts). Absent: all as engineUser.
   */
  engineUids?: import('../engine-identity.js').UidRange;
  /** The file engines' API key is read from at every spawn (--engine-key-file); absent: engines take no key. */
  engineKeyFile?: string;
  /**
   * --engine-tls: each start gets a certificate the agent issues (start/engine-tls.ts) and its
   * engine serves HTTPS; health checks pin it. Absent: plain HTTP.
   */
  engineTls?: boolean;
  /** Called only on transitions (Ready, unhealthy, back to Ready, exited), never on every poll. */
  onTransition?: (status: ShardStatus) => void;
  /** Narration of what the supervisor does; warnings carry level 'warn'. */
  log?: LineLog;
  /**
   * Dry-run (`--reconcile dry-run`): nothing is ever killed, at start or later; reports say
   * what act mode would do. Stops the control plane asks for are still carried out.
   */
  dryRun?: boolean;
  /** What to do with compute processes on our GPUs that we did not start (default report). */
  foreignGpuProcesses?: ForeignGpuProcessMode;
  /**
   * Throws (a non-retryable failure saying why) for a StartShard this host must not run: the
   * agent checks the catalog signature and the placement ticket here (agent/revision-check.ts);
   * `newStart`: no spec of this shard is recorded here. Absent: no check.
   */
  checkRevision?: (spec: StartShard, start: { newStart: boolean }) => Promise<void>;
  /** Throws when a pinned file:// source's bytes are not the pinned ones (agent/weights/file-pin.ts). */
  checkPinnedFiles?: (spec: StartShard) => Promise<void>;
  /**
   * Opens rank 0's rendezvous ports to the placement's peers only (agent/host/rendezvous-firewall.ts):
   * given every opening the host needs, whenever they change. Absent: no rules (unit tests).
   */
  rendezvousFirewall?: { apply(openings: import('./start/rendezvous.js').RendezvousOpening[]): Promise<void> };
  /** Counts what happens (the agent's metrics); called synchronously, must not throw. */
  count?: (event: SupervisorEvent) => void;
  /**
   * Resolves once the Ray cluster at `process.rayAddress` has `process.waitForRayNodes` nodes
   * (see engines/ray.ts: rayStatusArgs, parseRayStatusNodeCount). The supervisor does not run
   * `ray status` itself; the agent provides this. Must honour `signal` (a stop cancels it).
   */
  waitForRay?: (spec: StartShard, process: ProcessSpec, signal: AbortSignal) => Promise<void>;
  /** Ports in each Ray shard's block of engineContext.rayWorkerPorts (default 256; start/ports.ts). */
  rayPortsPerShard?: number;
  /**
   * Whether this host's Ray has the Ray Client, asked once before the first Ray head starts
   * (agent/host/ray-client.ts): if so its port is pinned in the head's block. Absent: it has not.
   */
  rayHasClient?: () => Promise<boolean>;
  /** Test hook: runs just before each spawn, after the spec record has been written. */
  beforeSpawn?: (info: { shardId: string; recordFile: string; process: ProcessSpec }) => void | Promise<void>;
  /** Test hook: runs after every process of a start is spawned, before start() returns. */
  afterSpawn?: (info: { shardId: string }) => void | Promise<void>;
}

/** The options with every default filled in. */
export type ResolvedOptions = SupervisorOptions &
  Required<
    Pick<
      SupervisorOptions,
      | 'launcher'
      | 'healthIntervalMs'
      | 'healthTimeoutMs'
      | 'unhealthyAfterFailures'
      | 'stopGraceSeconds'
      | 'unidentifiedGraceMs'
      | 'workerReadyAfterMs'
      | 'maxLogBytes'
      | 'logCheckIntervalMs'
      | 'logRetentionMs'
      | 'retentionCheckIntervalMs'
      | 'passEnv'
      | 'log'
      | 'dryRun'
      | 'foreignGpuProcesses'
    >
  >;

export function resolveOptions(options: SupervisorOptions, defaultLauncher: Launcher): ResolvedOptions {
  return {
    ...options,
    launcher: options.launcher ?? defaultLauncher,
    healthIntervalMs: options.healthIntervalMs ?? 1000,
    healthTimeoutMs: options.healthTimeoutMs ?? 2000,
    unhealthyAfterFailures: options.unhealthyAfterFailures ?? 3,
    stopGraceSeconds: options.stopGraceSeconds ?? 10,
    unidentifiedGraceMs: options.unidentifiedGraceMs ?? 5000,
    workerReadyAfterMs: options.workerReadyAfterMs ?? 1000,
    maxLogBytes: options.maxLogBytes ?? 64 * 1024 * 1024,
    logCheckIntervalMs: options.logCheckIntervalMs ?? 10_000,
    logRetentionMs: options.logRetentionMs ?? 7 * 86_400_000,
    retentionCheckIntervalMs: options.retentionCheckIntervalMs ?? 10 * 60_000,
    passEnv: options.passEnv ?? [],
    log: options.log ?? (() => {}),
    dryRun: options.dryRun ?? false,
    foreignGpuProcesses: options.foreignGpuProcesses ?? 'report',
  };
}
