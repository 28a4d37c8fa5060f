// Our own Prometheus metrics, defined once: the agent's and the control worker's, made through
// the Temporal Runtime's metric meter, so that one /metrics endpoint per process serves them
// beside the SDK's own (temporal_*). Process side. The dashboard (deploy/grafana/) and its
// test read the names from here; the router's live in router/metrics.ts.
import type { MetricCounter, MetricGauge, MetricHistogram, MetricMeter } from '@temporalio/common';

interface Definition {
  name: string;
  kind: 'counter' | 'gauge' | 'histogram';
  help: string;
  unit?: string;
  labels: readonly string[];
}

export const AGENT_METRICS = {
  engines: { name: 'llmgw_agent_engines', kind: 'gauge', help: 'Shards this agent runs, by state.', labels: ['state'] },
  engineStarts: {
    name: 'llmgw_agent_engine_starts',
    kind: 'counter',
    help: 'Shards started; kind=restart when the shard had run before (the replica restarts it).',
    labels: ['kind'],
  },
  engineExits: { name: 'llmgw_agent_engine_exits', kind: 'counter', help: 'Shards whose processes exited or failed to start.', labels: [] },
  adoptions: { name: 'llmgw_agent_adoptions', kind: 'counter', help: 'Engines a previous agent left running, taken over.', labels: [] },
  kills: {
    name: 'llmgw_agent_kills',
    kind: 'counter',
    help: 'Processes killed, by reason: unidentified (ours, no spec), foreign (kill mode), control-plane (reconciliation).',
    labels: ['reason'],
  },
  gpus: {
    name: 'llmgw_agent_gpus',
    kind: 'gauge',
    help: 'Managed GPUs by health: healthy, problem, or foreign (held by a process llmgw did not start).',
    labels: ['health'],
  },
  gpuHealthy: { name: 'llmgw_agent_gpu_healthy', kind: 'gauge', help: '1 while a GPU has no problem, 0 otherwise.', labels: ['gpu'] },
  engineSleeps: {
    name: 'llmgw_agent_engine_sleeps',
    kind: 'counter',
    help: 'Engines put to sleep (sleepShard), by level and result: asleep, failed.',
    labels: ['level', 'result'],
  },
  engineWakes: {
    name: 'llmgw_agent_engine_wakes',
    kind: 'counter',
    help: 'Engines woken (wakeShard), by result: woken, awake (it was already), out_of_memory (no room on its GPU), failed.',
    labels: ['result'],
  },
  engineWakeLatency: {
    name: 'llmgw_agent_engine_wake_latency',
    kind: 'histogram',
    unit: 'ms',
    help: 'From the wake call to the engine answering again, in ms (woken engines only).',
    labels: [],
  },
  foreignProcesses: {
    name: 'llmgw_agent_foreign_processes',
    kind: 'gauge',
    help: 'Compute processes on managed GPUs that llmgw did not start.',
    labels: [],
  },
} as const satisfies Record<string, Definition>;

export const WORKER_METRICS = {
  placements: {
    name: 'llmgw_placements',
    kind: 'counter',
    help: 'Placement attempts of replicas, by outcome: placed, unschedulable, error.',
    labels: ['outcome'],
  },
  placementLatency: {
    name: 'llmgw_placement_latency',
    kind: 'histogram',
    unit: 'ms',
    help: 'Time one placement takes (candidates, reserves on node workflows), in ms.',
    labels: ['outcome'],
  },
  reconcileActions: {
    name: 'llmgw_reconcile_actions',
    kind: 'counter',
    help: 'Actions reconciliation planned, by kind (adopt, rebuild, stop, release, kill) and outcome (done, not-done, dry-run).',
    labels: ['kind', 'outcome'],
  },
  batchLines: {
    name: 'llmgw_batch_lines',
    kind: 'counter',
    help: 'Lines of batches this worker ran, by outcome: completed (an output line), failed (an error line), retried (sent again after a 429, 503, 5xx or no answer).',
    labels: ['outcome'],
  },
  deployments: {
    name: 'llmgw_deployments',
    kind: 'gauge',
    help: 'Running deployments by phase (from visibility; the same figure from every control worker).',
    labels: ['phase'],
  },
} as const satisfies Record<string, Definition>;

/** Bucket bounds for our histograms (the SDK's defaults are coarse for sub-second latencies). */
export const HISTOGRAM_BUCKETS: Record<string, number[]> = {
  [WORKER_METRICS.placementLatency.name]: [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000],
  [AGENT_METRICS.engineWakeLatency.name]: [100, 250, 500, 1000, 2500, 5000, 10000, 30000, 120000],
};

/**
 * The Temporal SDK metrics (Core's, prefixed temporal_) the dashboard reads. Histograms are in
 * ms. Those marked `onlyWhen` appear only after that happens; the rest appear once a worker polls.
 */
export const TEMPORAL_SDK_METRICS: readonly { name: string; kind: 'counter' | 'gauge' | 'histogram'; onlyWhen?: string }[] = [
  { name: 'temporal_workflow_task_schedule_to_start_latency', kind: 'histogram' },
  { name: 'temporal_workflow_task_execution_latency', kind: 'histogram' },
  { name: 'temporal_activity_schedule_to_start_latency', kind: 'histogram' },
  { name: 'temporal_activity_execution_latency', kind: 'histogram' },
  { name: 'temporal_worker_task_slots_available', kind: 'gauge' },
  { name: 'temporal_request', kind: 'counter' },
  { name: 'temporal_workflow_task_execution_failed', kind: 'counter', onlyWhen: 'a workflow task fails' },
  { name: 'temporal_activity_execution_failed', kind: 'counter', onlyWhen: 'an activity fails' },
  { name: 'temporal_request_failure', kind: 'counter', onlyWhen: 'a call to the server fails' },
];

export type Instrument<D extends Definition> = D['kind'] extends 'counter'
  ? MetricCounter
  : D['kind'] extends 'gauge'
    ? MetricGauge
    : MetricHistogram;

/** Creates the instruments of a definition table on `meter`. */
export function instruments<T extends Record<string, Definition>>(meter: MetricMeter, table: T): { [K in keyof T]: Instrument<T[K]> } {
  const out: Record<string, MetricCounter | MetricGauge | MetricHistogram> = {};
  for (const [key, d] of Object.entries(table)) {
    switch (d.kind) {
      case 'counter':
        out[key] = meter.createCounter(d.name, d.unit, d.help);
        break;
      case 'gauge':
        out[key] = meter.createGauge(d.name, 'int', d.unit, d.help);
        break;
      case 'histogram':
        out[key] = meter.createHistogram(d.name, 'int', d.unit, d.help);
        break;
      default: {
        const unknown: never = d.kind;
        throw new Error(`unknown metric kind ${String(unknown)}`);
      }
    }
  }
  return out as { [K in keyof T]: Instrument<T[K]> };
}

/** Every metric name a scrape of an agent or a worker can show of ours, with histogram series. */
export function ourSeriesNames(): string[] {
  const names: string[] = [];
  for (const d of [...Object.values(AGENT_METRICS), ...Object.values(WORKER_METRICS)] as Definition[]) {
    names.push(...(d.kind === 'histogram' ? [`${d.name}_bucket`, `${d.name}_sum`, `${d.name}_count`] : [d.name]));
  }
  return names;
}
