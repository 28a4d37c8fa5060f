// What each router process tells the autoscaler: the requests it holds per model and the load
// of every engine as it last scraped it, with its own requests in flight there. A single router
// hands its report over directly; the workers of a --workers cluster send theirs to the primary
// over IPC once a second, and a held request for a model with no replica at once (the wake must
// not wait for the next report). Router side.
import type { Endpoint, EngineSample } from '../engines/endpoint.js';

export interface LoadReport {
  /** Requests held, by served name. */
  queued: Record<string, number>;
  /** Of those, the sheddable ones (priority below zero), by served name: a profile may not scale up for them. */
  sheddable?: Record<string, number>;
  /** By endpoint URL. */
  engines: Record<string, EngineSample>;
}

/** One process's report: its endpoints' samples and its waiting lines' depths. */
export function reportOf(
  endpoints: Iterable<Endpoint>,
  queued: Record<string, number>,
  sheddable: Record<string, number> = {},
): LoadReport {
  const engines: Record<string, EngineSample> = {};
  for (const e of endpoints) engines[e.url] = e.sample();
  return { queued, sheddable, engines };
}

/** All router processes' reports as one: held requests and in-flight counts summed, each engine's freshest scrape. */
export function mergeReports(reports: readonly LoadReport[]): LoadReport {
  if (reports.length === 1) return reports[0] as LoadReport;
  const queued: Record<string, number> = {};
  const sheddable: Record<string, number> = {};
  const engines: Record<string, EngineSample> = {};
  for (const report of reports) {
    for (const [model, n] of Object.entries(report.queued)) queued[model] = (queued[model] ?? 0) + n;
    for (const [model, n] of Object.entries(report.sheddable ?? {})) sheddable[model] = (sheddable[model] ?? 0) + n;
    for (const [url, sample] of Object.entries(report.engines)) {
      const seen = engines[url];
      if (seen === undefined) engines[url] = { ...sample };
      else {
        const inflight = seen.inflight + sample.inflight;
        if (sample.at > seen.at) Object.assign(seen, sample);
        seen.inflight = inflight;
      }
    }
  }
  return { queued, sheddable, engines };
}

const LOAD = 'llmgw-router:load';
const HOLD = 'llmgw-router:hold';

export type LoadMessage = { type: typeof LOAD; report: LoadReport };
export type HoldMessage = { type: typeof HOLD; model: string };

export function isLoadMessage(m: unknown): m is LoadMessage {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === LOAD;
}

export function isHoldMessage(m: unknown): m is HoldMessage {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === HOLD;
}

/** How often a cluster worker reports, and after how long the primary forgets a silent worker's report. */
export const REPORT_EVERY_MS = 1000;
export const REPORT_STALE_MS = 3500;

/** In a cluster worker: sends `report()` to the primary every second until the returned function is called. */
export function reportToPrimary(report: () => LoadReport): () => void {
  const timer = setInterval(() => {
    if (process.connected) process.send?.({ type: LOAD, report: report() } satisfies LoadMessage);
  }, REPORT_EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/** In a cluster worker: tells the primary that requests wait for a model with no replica. */
export function holdToPrimary(model: string): void {
  if (process.connected) process.send?.({ type: HOLD, model } satisfies HoldMessage);
}
