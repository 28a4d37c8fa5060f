// The agent's own metrics (names in common/metrics.ts): engines by state, starts and restarts,
// exits, adoptions, kills by reason, sleeps and wakes, and the health of its GPUs. Agent side. Counters follow
// the supervisor's events; gauges are taken from the agent's current view every few seconds.
import type { MetricMeter } from '@temporalio/common';
import { AGENT_METRICS, instruments } from '../common/metrics.js';
import type { GPU } from '../proto/gen/llmgw/v1/gpu_pb.js';
import type { ForeignProcess } from '../proto/gen/llmgw/v1/register_pb.js';
import { ShardState, type RunningShard } from '../proto/gen/llmgw/v1/shard_pb.js';
import type { SupervisorEvent } from './supervisor/options.js';

export interface AgentView {
  shards: RunningShard[];
  gpus: GPU[];
  managedGpus: number[];
  foreign: ForeignProcess[];
}

const STATES = Object.values(ShardState).filter(
  (value): value is ShardState => typeof value === 'number' && value !== ShardState.UNSPECIFIED,
);

function stateLabel(state: ShardState): string {
  return ShardState[state]?.toLowerCase() ?? 'unknown';
}

export interface AgentMetrics {
  /** The supervisor's `count` option. */
  count(event: SupervisorEvent): void;
  /** Sets the gauges from the agent's current view. */
  observe(view: AgentView): void;
  /** A sleepShard or wakeShard call ended (agent/activities.ts). */
  sleepCall(call: SleepCallOutcome): void;
}

export type SleepCallOutcome =
  | { kind: 'sleep'; level: 1 | 2; result: 'asleep' | 'failed' }
  | { kind: 'wake'; result: 'woken' | 'awake' | 'out_of_memory' | 'failed'; tookMs?: number };

export function createAgentMetrics(meter: MetricMeter): AgentMetrics {
  const m = instruments(meter, AGENT_METRICS);
  return {
    count(event) {
      switch (event.kind) {
        case 'kill':
          m.kills.add(1, { reason: event.reason });
          return;
        case 'adopt':
          m.adoptions.add(1);
          return;
        case 'start':
          m.engineStarts.add(1, { kind: event.restart ? 'restart' : 'new' });
          return;
        case 'exit':
          m.engineExits.add(1);
          return;
        default: {
          const unknown: never = event;
          throw new Error(`unknown supervisor event ${JSON.stringify(unknown)}`);
        }
      }
    },
    sleepCall(call) {
      if (call.kind === 'sleep') {
        m.engineSleeps.add(1, { level: String(call.level), result: call.result });
        return;
      }
      m.engineWakes.add(1, { result: call.result });
      if (call.result === 'woken' && call.tookMs !== undefined) m.engineWakeLatency.record(call.tookMs);
    },
    observe(view) {
      // Every state is set, zero included: a gauge left at its last value would lie.
      for (const state of STATES) {
        m.engines.set(view.shards.filter((s) => s.status?.state === state).length, { state: stateLabel(state) });
      }
      const foreignGpus = new Set(view.foreign.filter((f) => !f.killed).flatMap((f) => f.gpuIndices));
      const counts = { healthy: 0, problem: 0, foreign: 0 };
      for (const gpu of view.gpus) {
        if (!view.managedGpus.includes(gpu.index)) continue;
        const problems = gpu.health?.problems.length ?? 0;
        m.gpuHealthy.set(problems === 0 && !foreignGpus.has(gpu.index) ? 1 : 0, { gpu: String(gpu.index) });
        if (foreignGpus.has(gpu.index)) counts.foreign++;
        else if (problems > 0) counts.problem++;
        else counts.healthy++;
      }
      for (const [health, count] of Object.entries(counts)) m.gpus.set(count, { health });
      m.foreignProcesses.set(view.foreign.filter((f) => !f.killed).length);
    },
  };
}
