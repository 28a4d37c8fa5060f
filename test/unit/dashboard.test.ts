// The Grafana dashboard (deploy/grafana/llmgw-dashboard.json) reads only metrics that exist:
// every name in every query is one the router (router/metrics.ts), the agents and the control
// worker (common/metrics.ts) or the Temporal SDK (the names our e2e scrape checks) expose.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ourSeriesNames, TEMPORAL_SDK_METRICS } from '../../common/metrics.js';
import { RouterMetrics } from '../../router/metrics.js';

const DASHBOARD = join(__dirname, '../../deploy/grafana/llmgw-dashboard.json');

interface Panel {
  title?: string;
  type: string;
  targets?: { expr?: string }[];
  panels?: Panel[];
}

const PROMQL_WORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset']);

/** The metric names a PromQL expression reads (label matchers, ranges, groupings and functions left out). */
function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names: string[] = [];
  for (const match of stripped.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*(?=\s*(\()?)/g)) {
    const [word, call] = [match[0], match[1]];
    if (call || PROMQL_WORDS.has(word) || /^\d/.test(word)) continue;
    names.push(word);
  }
  return names;
}

async function knownNames(): Promise<Set<string>> {
  const router = new RouterMetrics(() => [], { processMetrics: true });
  const names = new Set<string>(ourSeriesNames());
  for (const metric of await router.registry.getMetricsAsJSON()) {
    const type = String(metric.type);
    const suffixes = type === 'histogram' ? ['_bucket', '_sum', '_count'] : type === 'summary' ? ['', '_sum', '_count'] : [''];
    for (const suffix of suffixes) names.add(`${metric.name}${suffix}`);
  }
  for (const metric of TEMPORAL_SDK_METRICS) {
    for (const suffix of metric.kind === 'histogram' ? ['_bucket', '_sum', '_count'] : ['']) names.add(`${metric.name}${suffix}`);
  }
  return names;
}

function panelsOf(panels: Panel[]): Panel[] {
  return panels.flatMap((panel) => [panel, ...panelsOf(panel.panels ?? [])]);
}

describe('the Grafana dashboard', () => {
  it('reads the names out of PromQL, leaving functions, labels, ranges and groupings out', () => {
    expect(
      metricNames('histogram_quantile(0.95, sum by (le, model) (rate(llmgw_router_request_duration_seconds_bucket{model="a"}[5m])))'),
    ).toEqual(['llmgw_router_request_duration_seconds_bucket']);
    expect(metricNames('count by (llmgw_node) (llmgw_agent_gpu_healthy == 0) / on (x) group_left foo_total')).toEqual([
      'llmgw_agent_gpu_healthy',
      'foo_total',
    ]);
  });

  it('queries only metrics that exist, and shows the router, the control worker, the agents and the Temporal SDK', async () => {
    const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: Panel[]; title: string };
    const known = await knownNames();
    const queried = new Set<string>();
    for (const panel of panelsOf(dashboard.panels)) {
      for (const target of panel.targets ?? []) {
        expect(target.expr, `panel "${panel.title}" has a target without a query`).toBeTruthy();
        const names = metricNames(target.expr ?? '');
        expect(names.length, `panel "${panel.title}": ${target.expr}`).toBeGreaterThan(0);
        for (const name of names) {
          expect(known.has(name), `panel "${panel.title}" queries ${name}, which nothing exposes`).toBe(true);
          queried.add(name);
        }
      }
    }
    for (const prefix of ['llmgw_router_', 'llmgw_agent_', 'llmgw_placement', 'llmgw_reconcile_', 'llmgw_deployments', 'temporal_']) {
      expect(
        [...queried].some((name) => name.startsWith(prefix)),
        `nothing on the dashboard reads ${prefix}*`,
      ).toBe(true);
    }
  });
});
