// The node-local activities an agent serves on `agent/<nodeId>`: thin wrappers that put
// the supervisor behind Temporal (heartbeats, cancellation, non-retryable failures).
import { ApplicationFailure, Context } from '@temporalio/activity';
import { FailureType } from '../common/failures.js';
import { create } from '@bufbuild/protobuf';
import type { KillProcesses, KillProcessesResult, Register } from '../proto/gen/llmgw/v1/register_pb.js';
import { KillProcessesResultSchema } from '../proto/gen/llmgw/v1/register_pb.js';
import type {
  DrainShard,
  DrainShardResult,
  RunningShard,
  ShardStatus,
  StartShard,
  StopShard,
  StopShardResult,
  WaitHealthy,
} from '../proto/gen/llmgw/v1/shard_pb.js';
import type { AgentActivities, ClearGpuFaultInput, PresenceInput } from './activity-types.js';
import type { Supervisor } from './supervisor/supervisor.js';
import type { EndpointAttester, RendezvousAttester } from './endpoint-attester.js';
import { createSleepActivities } from './sleep.js';
import type { SleepShardRequest, WakeShardRequest } from '../common/sleep-types.js';
import type { StopCheck } from './stop-check.js';
import type { SleepCallOutcome } from './metrics.js';

export interface AgentActivityDeps {
  supervisor: Supervisor;
  describe(): Promise<Register>;
  survey(): Promise<Register>;
  /** Called when a presence activity starts: the control plane is (again) talking to us. */
  onPresenceStarted(): void;
  presenceSummary(): Record<string, unknown>;
  drain(request: DrainShard): Promise<DrainShardResult>;
  /** Adds the agent's signed endpoint attestation to waitHealthy's answer (agent/endpoint-attester.ts). */
  attestEndpoint?: EndpointAttester;
  /** Signs rank 0's rendezvous port in startShard's answer (agent/endpoint-attester.ts). */
  attestRendezvous?: RendezvousAttester;
  /** GPUs held out for faults found while serving (agent/gpu-health.ts). */
  gpuHealth?: { refusal(gpuIndices: number[]): string | undefined; clear(index: number): boolean };
  /** Refuses a stop from a run that is not the shard's placement's (agent/stop-check.ts). */
  checkStop?: StopCheck;
  /** Counts each sleep and wake (agent/metrics.ts). */
  onSleepCall?: (call: SleepCallOutcome) => void;
}

/**
 * Runs `work` heartbeating every second. Their callers give these calls a short heartbeat
 * timeout: an agent that dies mid-call, or a task the server handed to a poller whose
 * connection then died (a partition healing), is found lost in seconds, not at the end of a
 * long start-to-close timeout (docs/failures.md, "A host cut off").
 */
async function beating<T>(details: Record<string, unknown>, work: () => Promise<T>): Promise<T> {
  const context = Context.current();
  const heartbeat = setInterval(() => context.heartbeat(details), 1_000);
  try {
    return await work();
  } finally {
    clearInterval(heartbeat);
  }
}

/** Every agent activity but the weights' (agent/weights/activity.ts). */
export function createAgentActivities(deps: AgentActivityDeps): Omit<AgentActivities, 'fetchWeights' | 'removeWeights'> {
  const sleep = createSleepActivities(deps.supervisor);
  return {
    // A wake may read weights for minutes: heartbeats say the agent is still at it.
    async sleepShard(request: SleepShardRequest) {
      try {
        const slept = await beating({ sleeping: request.shardId }, () => sleep.sleepShard(request));
        deps.onSleepCall?.({ kind: 'sleep', level: slept.level, result: 'asleep' });
        return slept;
      } catch (error) {
        deps.onSleepCall?.({ kind: 'sleep', level: request.level, result: 'failed' });
        throw error;
      }
    },
    async wakeShard(request: WakeShardRequest) {
      try {
        const woke = await beating({ waking: request.shardId }, () => sleep.wakeShard(request));
        deps.onSleepCall?.({ kind: 'wake', result: woke.tookMs === 0 ? 'awake' : 'woken', tookMs: woke.tookMs });
        return woke;
      } catch (error) {
        const outOfMemory = (error as { type?: string }).type === FailureType.WakeOutOfMemory;
        deps.onSleepCall?.({ kind: 'wake', result: outOfMemory ? 'out_of_memory' : 'failed' });
        throw error;
      }
    },
    shardSleepState: (request: { shardId: string }) => sleep.shardSleepState(request),

    async startShard(spec: StartShard): Promise<RunningShard> {
      // Heartbeats, so that an agent that dies mid-start is noticed in one heartbeat timeout
      // and the retry reaches the restarted agent (which finds the spec and starts once).
      // A GPU found lost is refused, not retried: the replica is placed elsewhere.
      const refusal = deps.gpuHealth?.refusal(spec.gpuIndices);
      if (refusal) throw ApplicationFailure.nonRetryable(refusal, FailureType.PlacementRefused);
      const running = await beating({ starting: spec.shardId }, () => deps.supervisor.start(spec));
      // Rank 0's port reaches the worker ranks through the replica: they join only the one signed here.
      return deps.attestRendezvous ? deps.attestRendezvous(running) : running;
    },

    async stopShard(request: StopShard): Promise<StopShardResult> {
      // Before anything is touched: anyone in the namespace can schedule this on our queue.
      await deps.checkStop?.(request.shardId);
      return beating({ stopping: request.shardId }, () => deps.supervisor.stop(request));
    },

    async waitHealthy(request: WaitHealthy): Promise<ShardStatus> {
      const context = Context.current();
      const ready = await deps.supervisor.waitHealthy(request.shardId, request.timeoutSeconds, {
        signal: context.cancellationSignal,
        heartbeat: (details) => context.heartbeat(details),
      });
      // The endpoint the replica routes to is the one the agent signs for here: the route
      // signer takes no port on the word of whoever completed startShard.
      return deps.attestEndpoint ? deps.attestEndpoint(ready) : ready;
    },

    async presence(input: PresenceInput): Promise<void> {
      const context = Context.current();
      if (input.register !== false) deps.onPresenceStarted();
      // Heartbeat several times per timeout so one late beat does not look like death.
      const everyMs = Math.max(500, (input.heartbeatSeconds * 1000) / 4);
      context.heartbeat(deps.presenceSummary());
      const timer = setInterval(() => context.heartbeat(deps.presenceSummary()), everyMs);
      try {
        await context.cancelled;
      } catch {
        // Cancelled by the node workflow (continue-as-new) or the worker shutting down.
      } finally {
        clearInterval(timer);
      }
    },

    async drainShard(request: DrainShard): Promise<DrainShardResult> {
      return deps.drain(request);
    },

    async describe(): Promise<Register> {
      return beating({ describing: true }, () => deps.describe());
    },

    async survey(): Promise<Register> {
      return beating({ surveying: true }, () => deps.survey());
    },

    async clearGpuFault(input: ClearGpuFaultInput): Promise<{ cleared: boolean }> {
      return { cleared: deps.gpuHealth?.clear(input.gpuIndex) ?? false };
    },

    async killProcesses(request: KillProcesses): Promise<KillProcessesResult> {
      return create(
        KillProcessesResultSchema,
        await beating({ killing: request.pids.length }, () => deps.supervisor.kill(request.pids, request.reason)),
      );
    },
  };
}
