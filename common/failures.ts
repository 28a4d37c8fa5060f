// The failure types that workflows must tell apart, in one place: activities throw
// ApplicationFailures with these `type`s, and retry policies list the non-retryable
// ones by name. Safe to import from workflows.

export const FailureType = {
  /** No node has room for the request now; not an error, the replica waits. */
  NoCapacity: 'NoCapacity',
  /** The engine process exited (while loading, or later). */
  EngineExited: 'EngineExited',
  /** The engine did not become healthy within the profile's startup timeout. */
  StartupTimeout: 'StartupTimeout',
  UnknownModel: 'UnknownModel',
  UnknownProfile: 'UnknownProfile',
  UnknownGpuClass: 'UnknownGpuClass',
  /** A StartShard or other input that can never succeed as given. */
  InvalidSpec: 'InvalidSpec',
  /** The same shard id was started before with a different spec. */
  SpecConflict: 'SpecConflict',
  /** The agent's state dir cannot be written: nothing can be started safely. */
  StateDirUnwritable: 'StateDirUnwritable',
  /** No free port in the agent's engine port range. */
  NoFreePort: 'NoFreePort',
  InvalidInput: 'InvalidInput',
  ShardNotFound: 'ShardNotFound',
  /**
   * The agent refused a StartShard whose profile is not a revision the control worker signed
   * from the catalog (no signature, a key the agent lacks, or a profile changed after signing).
   */
  UnsignedRevision: 'UnsignedRevision',
  /** A catalog env reference names a host variable the agent was not given (--pass-env, --env-file). */
  HostEnvMissing: 'HostEnvMissing',
  /**
   * The agent refused a start's placement: GPUs it does not manage or another live shard
   * holds, or a port outside its range (agent/supervisor/start/start-checks.ts).
   */
  PlacementRefused: 'PlacementRefused',
  /** The weights' source refused them (no or a refused token, an unknown revision): no retry helps. */
  WeightsUnavailable: 'WeightsUnavailable',
  /** This host cannot hold the weights (disk full, or over its --weights-budget with nothing evictable). */
  WeightsNoSpace: 'WeightsNoSpace',
  /**
   * A continued run's carried state did not verify (workflows/carried.ts): the run ends without
   * acting on it, and reconciliation rebuilds the replica from what the agents report.
   */
  CarriedStateRefused: 'CarriedStateRefused',
  /** sleepShard on an engine not started able to sleep (no sleep policy in its profile, or SGLang). */
  SleepUnsupported: 'SleepUnsupported',
  /**
   * A wake found too little GPU memory (awake engines hold it): the engine stays asleep, and the
   * node workflow puts another to sleep first (docs/sleep.md).
   */
  WakeOutOfMemory: 'WakeOutOfMemory',
  /**
   * The agent refused a stopShard for a shard placed under a ticket, sent by a run that is
   * neither the ticket's replica run chain nor reconcileNode on the control queue (agent/stop-check.ts).
   */
  StopRefused: 'StopRefused',
} as const;

export type FailureType = (typeof FailureType)[keyof typeof FailureType];

/** Failures that retrying the same activity can never fix. */
export const NON_RETRYABLE_AGENT_FAILURES: FailureType[] = [
  FailureType.InvalidSpec,
  FailureType.SpecConflict,
  FailureType.StateDirUnwritable,
  FailureType.NoFreePort,
  FailureType.EngineExited,
  FailureType.StartupTimeout,
  FailureType.ShardNotFound,
  FailureType.UnsignedRevision,
  FailureType.HostEnvMissing,
  FailureType.PlacementRefused,
  FailureType.WeightsUnavailable,
  FailureType.WeightsNoSpace,
  FailureType.SleepUnsupported,
];
