// The router's Prometheus series for LoRA adapters: loads (by result), unloads (by reason),
// load time, requests held for a load, and each engine's adapters as the router sees them.
// Router side; adapter-router.ts counts, /metrics shows.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { EngineAdapters } from './adapter-engines.js';

export class AdapterMetrics {
  readonly loads: Counter;
  readonly unloads: Counter;
  readonly loadSeconds: Histogram;
  readonly held: Counter;
  readonly holding: Gauge;

  constructor(registry: Registry, views: ReadonlyMap<string, EngineAdapters>) {
    const registers = [registry];
    this.loads = new Counter({
      name: 'llmgw_router_adapter_loads_total',
      help: 'Adapter loads this router asked engines for, by result.',
      labelNames: ['result'],
      registers,
    });
    this.unloads = new Counter({
      name: 'llmgw_router_adapter_unloads_total',
      help: 'Adapter unloads this router asked engines for, by reason (lru: to make room; removed: the catalog dropped it).',
      labelNames: ['reason'],
      registers,
    });
    this.loadSeconds = new Histogram({
      name: 'llmgw_router_adapter_load_seconds',
      help: 'Time an engine took to load an adapter.',
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
      registers,
    });
    this.held = new Counter({
      name: 'llmgw_router_adapter_held_requests_total',
      help: 'Requests held while their adapter was loaded.',
      registers,
    });
    this.holding = new Gauge({ name: 'llmgw_router_adapter_requests_held', help: 'Requests held now for an adapter load.', registers });
    new Gauge({
      name: 'llmgw_router_adapters_loaded',
      help: 'Adapters each engine holds, as the router last saw it.',
      labelNames: ['endpoint'],
      registers,
      // Read at scrape time, so the page shows the view as it is.
      collect() {
        this.reset();
        for (const [url, view] of views) this.set({ endpoint: url }, view.loaded.size);
      },
    });
  }
}
