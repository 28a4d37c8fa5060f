// bench:swap's figures: what each half's requests and histories add up to, printed side by side
// with the issue's goals beside them. Figures, not asserts.
import { percentile } from './fleet-measure.js';
import type { overCommittedMoments } from './swap-node.js';
import { toFirstToken, type RecordedSleep, type RecordedWake } from './swap-histories.js';
import type { SentRequest } from './swap-traffic.js';

export type NodeCheck = Awaited<ReturnType<typeof overCommittedMoments>>;

const fmt = (ms: number): string => (Number.isFinite(ms) ? `${(ms / 1000).toFixed(2)} s` : '—');
export const p50p90 = (xs: number[]): string => `${fmt(percentile(xs, 50))} / ${fmt(percentile(xs, 90))}`;

export interface PhaseFigures {
  requests: number;
  failed: Map<string, number>;
  ttft: number[];
  held: number[];
  toFirstToken: number[];
  moments: number;
}

export function figures(requests: SentRequest[], toFirst: number[], moments: number): PhaseFigures {
  const failed = new Map<string, number>();
  for (const r of requests) if (r.status !== 200) failed.set(String(r.status), (failed.get(String(r.status)) ?? 0) + 1);
  const answered = requests.filter((r) => r.firstTokenAt !== undefined);
  return {
    requests: requests.length,
    failed,
    ttft: answered.map((r) => r.firstTokenAt! - r.sentAt),
    held: answered.filter((r) => r.queuedMs > 0).map((r) => r.firstTokenAt! - r.sentAt),
    toFirstToken: toFirst,
    moments,
  };
}

export function printSideBySide(
  sleep: PhaseFigures,
  cold: PhaseFigures,
  engine: { wakeSeconds: number; awakeTtftMs: number },
  node: NodeCheck,
): void {
  const { wakeSeconds, awakeTtftMs } = engine;
  const row = (label: string, a: string, b: string): void => console.log(`  ${label.padEnd(44)} ${a.padStart(14)} ${b.padStart(14)}`);
  const failures = (f: PhaseFigures): string => String([...f.failed.values()].reduce((a, b) => a + b, 0));
  console.log('');
  row('', 'with sleep', 'cold starts');
  row('requests', String(sleep.requests), String(cold.requests));
  row('failed (goal 0)', failures(sleep), failures(cold));
  row('time to first token p50 / p90', p50p90(sleep.ttft), p50p90(cold.ttft));
  row('held at the router: to first token p50 / p90', p50p90(sleep.held), p50p90(cold.held));
  row('wakes / starts', String(sleep.moments), String(cold.moments));
  row('wake (engine start) to first token p50 / p90', p50p90(sleep.toFirstToken), p50p90(cold.toFirstToken));
  for (const [phase, f] of [
    ['with sleep', sleep.failed],
    ['cold starts', cold.failed],
  ] as const) {
    if (f.size) console.log(`  failures ${phase}: ${[...f].map(([k, v]) => `${v}× ${k}`).join(', ')}`);
  }
  const bound = 1.5 * (wakeSeconds * 1000 + awakeTtftMs);
  const p90 = percentile(sleep.toFirstToken, 90);
  console.log('');
  console.log(
    `  goal: p90 wake-to-first-token ≤ 1.5 × (wake ${wakeSeconds} s + TTFT ${fmt(awakeTtftMs)}) = ${fmt(bound)}: ${fmt(p90)} ${p90 <= bound ? 'met' : 'NOT met'}`,
  );
  const ratio = percentile(cold.toFirstToken, 90) / p90;
  console.log(`  goal: ≥ 10× better than cold starts at p90: ${ratio.toFixed(1)}× ${ratio >= 10 ? 'met' : 'NOT met'}`);
  console.log(
    `  goal: 0 moments with more awake engines on a GPU than fit: ${node.overCommitted} in ${node.updates} node Updates replayed (most awake on a GPU: ${node.maxLoad})`,
  );
}

/** Where a wake's time goes: the replica's own wake (room made included), then the route to the first token. */
export function printWakeBreakdown(wakes: RecordedWake[], sleeps: RecordedSleep[], requests: SentRequest[]): void {
  const toRouted = toFirstToken(
    wakes.map((w) => ({ model: w.model, at: w.completedAt, sentBy: w.completedAt })),
    requests,
  );
  const byWho = new Map<string, RecordedSleep[]>();
  for (const x of sleeps) {
    const who = x.by.split(':')[0]!;
    byWho.set(who, [...(byWho.get(who) ?? []), x]);
  }
  const woke = wakes.filter((w) => w.engineWakeAt !== undefined);
  console.log(
    `  with sleep: ${wakes.length} wakes; p50 / p90: waited for room on the GPU ${p50p90(woke.map((w) => w.engineWakeAt! - w.acceptedAt))}, ` +
      `engines woken ${p50p90(woke.map((w) => w.completedAt - w.engineWakeAt!))}, answered → first token ${p50p90(toRouted)}`,
  );
  for (const [who, list] of byWho) {
    console.log(
      `  with sleep: ${list.length} sleeps asked by ${who}, accepted → asleep p50 / p90 ${p50p90(list.map((x) => x.completedAt - x.acceptedAt))}`,
    );
  }
}
