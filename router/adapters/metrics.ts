// The router's Prometheus series for LoRA adapters: loads (by result), unloads (by reason),
// load time, requests held for a load, and each engine's adapters as the router sees them.
// Router side; adapters/router.ts counts, /metrics shows.
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { Series } from '../series.js';
import type { EngineAdapters } from './engines.js';

export class AdapterMetrics {
  readonly loads: Counter;
  readonly unloads: Counter;
  readonly loadSeconds: Histogram;
  readonly held: Counter;
  readonly holding: Gauge;

  constructor(registry: Registry, views: ReadonlyMap<string, EngineAdapters>) {
    const series = new Series(registry);
    this.loads = series.counter('llmgw_router_adapter_loads_total', 'Adapter loads this router asked engines for, by result.', ['result']);
    this.unloads = series.counter(
      'llmgw_router_adapter_unloads_total',
      'Adapter unloads this router asked engines for, by reason (lru: to make room; removed: the catalog dropped it).',
      ['reason'],
    );
    this.loadSeconds = series.histogram(
      'llmgw_router_adapter_load_seconds',
      'Time an engine took to load an adapter.',
      [],
      [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
    );
    this.held = series.counter('llmgw_router_adapter_held_requests_total', 'Requests held while their adapter was loaded.');
    this.holding = series.gauge('llmgw_router_adapter_requests_held', 'Requests held now for an adapter load.');
    series.gauge('llmgw_router_adapters_loaded', 'Adapters each engine holds, as the router last saw it.', ['endpoint'], {
      // Read at scrape time, so the page shows the view as it is.
      collect() {
        this.reset();
        for (const [url, view] of views) this.set({ endpoint: url }, view.loaded.size);
      },
    });
  }
}
