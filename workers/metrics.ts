// The control worker's own metrics (names in common/metrics.ts): placements and their latency
// (counted by the placement activity), batch lines (by the chunk activity), deployments by phase (counted from visibility every
// few seconds), and reconciliation's actions (counted by workflow-interceptors.ts). Worker side.
import type { Client } from '@temporalio/client';
import type { MetricMeter } from '@temporalio/common';
import type { BatchLineOutcome } from '../activities/batch-chunk.js';
import { everyWithoutOverlap } from '../common/every.js';
import { instruments, WORKER_METRICS } from '../common/metrics.js';
import type { DeploymentPhase } from '../common/replica-types.js';

export type PlacementOutcome = 'placed' | 'unschedulable' | 'error';

/** What the control activities count. */
export interface ControlMetrics {
  placement(outcome: PlacementOutcome, ms: number): void;
  batchLines(outcome: BatchLineOutcome, count: number): void;
}

const PHASES = [
  'Validating',
  'Progressing',
  'Ready',
  'Sleeping',
  'Idle',
  'RollingOut',
  'Degraded',
  'Undeploying',
  'Undeployed',
  'Failed',
] as const satisfies readonly DeploymentPhase[];
// Fails to compile when a phase is added to DeploymentPhase but not here.
const everyPhase: Exclude<DeploymentPhase, (typeof PHASES)[number]> extends never ? true : never = true;
void everyPhase;

export function createControlMetrics(meter: MetricMeter): ControlMetrics {
  const m = instruments(meter, WORKER_METRICS);
  return {
    placement(outcome, ms) {
      m.placements.add(1, { outcome });
      m.placementLatency.record(Math.max(0, Math.round(ms)), { outcome });
    },
    batchLines(outcome, count) {
      if (count > 0) m.batchLines.add(count, { outcome });
    },
  };
}

/**
 * Counts running deployments per phase (their LlmgwState) every `everyMs`; a failed count
 * (Temporal unreachable) leaves the last figures. Returns a stop function.
 */
export function watchDeployments(client: Client, meter: MetricMeter, everyMs = 15_000): () => void {
  const gauge = instruments(meter, { deployments: WORKER_METRICS.deployments }).deployments;
  return everyWithoutOverlap(everyMs, async () => {
    try {
      for (const phase of PHASES) {
        const { count } = await client.workflow.count(
          `WorkflowType = 'deployModel' AND ExecutionStatus = 'Running' AND LlmgwState = '${phase}'`,
        );
        gauge.set(count, { phase });
      }
    } catch {
      // Visibility unreachable: keep the last figures; the SDK's request metrics say why.
    }
  });
}
