// The router autoscaler's own Prometheus series (llmgw_autoscaler_*), beside the ladder's
// sleeps and wakes (ladder.ts). Router side.
import type { Registry } from 'prom-client';
import { Series } from '../series.js';

export function autoscalerSeries(registry: Registry) {
  const series = new Series(registry);
  return {
    recommended: series.gauge(
      'llmgw_autoscaler_recommended',
      'Replicas the load asks for now, before the stabilization windows, by deployment.',
      ['deployment'],
    ),
    desired: series.gauge('llmgw_autoscaler_desired', "The deployment's desired replica count, as the route table says.", ['deployment']),
    signal: series.gauge(
      'llmgw_autoscaler_signal',
      'What the autoscaler decides on, by deployment and signal (running, waiting, kv_cache, queued, in_flight, routable).',
      ['deployment', 'signal'],
    ),
    decisions: series.counter(
      'llmgw_autoscaler_decisions_total',
      'Counts this router sent, by deployment, direction (up, down, wake) and result (accepted; refused: another router had sent it, or nothing changed; failed).',
      ['deployment', 'direction', 'result'],
    ),
    lastDecision: series.gauge(
      'llmgw_autoscaler_last_decision_timestamp_seconds',
      'When this router last had a count accepted, by deployment (Unix time).',
      ['deployment'],
    ),
  };
}

export type AutoscalerSeries = ReturnType<typeof autoscalerSeries>;
