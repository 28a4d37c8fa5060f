// How the router declares its Prometheus series (prom-client): one registry given once, then one
// line per series — its name, help and labels — wherever it is counted (metrics.ts, the waiting
// room, the autoscaler, adapters). Router side; the names are listed in docs/operating.md.
import { Counter, Gauge, Histogram, type GaugeConfiguration, type Registry } from 'prom-client';

/** What a gauge may add: read at scrape time (`collect`), or merged across a cluster's workers. */
export type GaugeExtras<L extends string> = Pick<GaugeConfiguration<L>, 'collect' | 'aggregator'>;

export class Series {
  private readonly registers: Registry[];

  constructor(registry: Registry) {
    this.registers = [registry];
  }

  counter<L extends string = never>(name: string, help: string, labelNames: readonly L[] = []): Counter<L> {
    return new Counter<L>({ name, help, labelNames, registers: this.registers });
  }

  gauge<L extends string = never>(name: string, help: string, labelNames: readonly L[] = [], extras: GaugeExtras<L> = {}): Gauge<L> {
    return new Gauge<L>({ name, help, labelNames, registers: this.registers, ...extras });
  }

  histogram<L extends string = never>(name: string, help: string, labelNames: readonly L[], buckets: number[]): Histogram<L> {
    return new Histogram<L>({ name, help, labelNames, buckets, registers: this.registers });
  }
}
