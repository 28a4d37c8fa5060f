// How `npm run bench:fairness` (bench/fairness.ts) prints what it measured: percentiles, one line
// per load stream, a target's PASS or MISS, and the router's own prediction-error summary.
import type { StreamResult } from './fairness-load.js';

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

export const fixed = (v: number, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');

export function refusals(r: StreamResult): number {
  return Object.values(r.refused).reduce((s, n) => s + n, 0);
}

/** One stream's line: sent, answered, refused (by code), unfinished, throughput and TTFT percentiles. */
export function streamLine(r: StreamResult): string {
  const codes = Object.entries(r.refused)
    .map(([code, n]) => `${code} ${n}`)
    .join(', ');
  return (
    `    ${r.name.padEnd(22)} sent ${String(r.sent).padStart(5)}  ok ${String(r.ttfts.length).padStart(5)}  ` +
    `${fixed(r.throughput, 1).padStart(5)}/s  TTFT ms p50 ${fixed(percentile(r.ttfts, 50)).padStart(7)} ` +
    `p90 ${fixed(percentile(r.ttfts, 90)).padStart(7)} p99 ${fixed(percentile(r.ttfts, 99)).padStart(7)}` +
    `${refusals(r) > 0 ? `  refused ${refusals(r)} (${codes})` : ''}${r.unfinished > 0 ? `  unfinished ${r.unfinished}` : ''}`
  );
}

export function byName(results: StreamResult[], name: string): StreamResult {
  const r = results.find((x) => x.name === name);
  if (r === undefined) throw new Error(`no stream ${name}`);
  return r;
}

const verdicts: string[] = [];

/** Prints a target's verdict now and keeps it for the summary at the end. */
export function target(ok: boolean, what: string): void {
  const line = `  ${ok ? 'PASS' : 'MISS'}  ${what}`;
  console.log(line);
  verdicts.push(line);
}

export function summary(): void {
  console.log('\nsummary');
  for (const v of verdicts) console.log(v);
}

/** The router's `llmgw_router_ttft_prediction_error_seconds` series (sum, count, and the mean they give) from its /metrics. */
export function predictionError(metricsText: string): string[] {
  const name = 'llmgw_router_ttft_prediction_error_seconds';
  const lines = metricsText.split('\n').filter((l) => l.startsWith(name) && !l.includes('_bucket'));
  const out = lines.map((l) => `    ${l}`);
  const sums = new Map<string, { sum?: number; count?: number }>();
  for (const l of lines) {
    const m = /^(\w+?)_(sum|count)\{([^}]*)\}\s+(\S+)/.exec(l);
    if (m === null) continue;
    const labels = m[3] as string;
    const entry = sums.get(labels) ?? {};
    entry[m[2] as 'sum' | 'count'] = Number(m[4]);
    sums.set(labels, entry);
  }
  for (const [labels, { sum, count }] of sums)
    if (sum !== undefined && count) out.push(`    mean error {${labels}}: ${fixed((sum / count) * 1000)} ms over ${count} requests`);
  return out;
}

/** Of one priority's requests, how many the router held before sending and for how long in all (s), from `llmgw_router_flow_wait_seconds`. */
export function heldAtRouter(metricsText: string, priority: string): { count: number; sum: number } {
  const out = { count: 0, sum: 0 };
  for (const l of metricsText.split('\n')) {
    const m = /^llmgw_router_flow_wait_seconds_(sum|count)\{([^}]*)\}\s+(\S+)/.exec(l);
    if (m === null || !(m[2] as string).includes(`priority="${priority}"`)) continue;
    out[m[1] as 'sum' | 'count'] += Number(m[3]);
  }
  return out;
}
