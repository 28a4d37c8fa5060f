// `npm run bench:fairness` (node dist/bench/fairness.js [--seconds S] [--phase N]): the router's
// flow control (router/flow/, issue 39) against one saturated deployment, measured side by side
// in one run (about 3 minutes with the default 15 s phases; unloaded windows are half a phase).
// One fake engine with 16 slots decoding 50 tokens/s and prefilling 2000 tokens/s, answers of 16
// tokens, streamed: a capacity of about 48 requests/s; time to first token (TTFT) is from send to
// the first token chunk. The engine, the router and the load generator are separate processes;
// each phase has a fresh engine and router so that no tenant's history leaks into the next:
//   1. fairness: tenant Q at 0.2× capacity alone, then with tenant H at 10× Q's rate (2× capacity,
//      Poisson), equal weights: Q's p90 TTFT, and Q's refusals, with --fairness weighted and with
//      fifo and no kept slots (what the router did before priorities). The line is 256 long in
//      both, so that FIFO's wait settles (at about 256 / capacity) instead of growing with the
//      phase's length.
//   2. weights 3:1: tenants A and B both backlogged (closed loop, twice the slots each): A's
//      throughput over B's.
//   3. priorities at 2× capacity: critical at 0.25×, standard at 0.5× and sheddable at 1.25×
//      capacity (Poisson), a 32-request line, with the default --kept-slots 0.125 and with 0.25
//      (what critical's share of the load needs), side by side. Critical plus standard is below
//      capacity on purpose: above it standard must be refused too once nothing sheddable is left
//      to shed. Below 7/8 of it, too: while contended, 1/8 of the slots are kept for critical
//      requests and tenants below their share, which standard (above its share) may not use; at
//      0.6× standard sat at that edge and, on a busy machine, was refused.
//   4. deadlines: tenant I sends half its requests with a feasible deadline (2× its unloaded p50
//      TTFT) and half with 1 ms (below one prefill), while tenant T keeps the engine saturated
//      (closed loop, three times the slots): time to the 429 of infeasible ones, the share of
//      admitted ones that met their deadline, and the router's own prediction error.
// Nothing asserts on time: the figures depend on the machine (and mean less on one with fewer
// cores than busy processes); each target prints PASS or MISS.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { numberFlag, runMainOrRole } from './cli.js';
import type { LoadStream, StreamResult } from './fairness-load.js';
import { byName, fixed, heldAtRouter, percentile, predictionError, refusals, streamLine, summary, target } from './fairness-report.js';
import { Deployment, fairnessRole, Loader, MODEL, type EngineShape } from './fairness-roles.js';
import type { QueueSettings } from '../router/flow/waiting-room.js';

const SHAPE: EngineShape = { slots: 16, tokensPerSecond: 50, prefillTokensPerSecond: 2000 };
const MAX_TOKENS = 16;
/** Requests per second the engine finishes when full: its slots over one answer's decode time. */
const CAPACITY = SHAPE.slots / (MAX_TOKENS / SHAPE.tokensPerSecond);
const TARGETS = { fairRatio: 1.25, weightShare: 3, weightTolerance: 0.1, criticalRatio: 1.25, refusalMaxMs: 50, deadlinesMet: 0.9 };
const DRAIN_MS = 8000;
/** Phase 3 side by side: the default share of slots kept for critical requests, and one that covers critical's share of the load. */
const KEPT_SHARES = [0.125, 0.25];

const TENANTS = [
  { key: 'sk-bench-quiet-0123456789', tenant: 'quiet' },
  { key: 'sk-bench-heavy-0123456789', tenant: 'heavy' },
  { key: 'sk-bench-a-0123456789', tenant: 'a', weight: 3 },
  { key: 'sk-bench-b-0123456789', tenant: 'b', weight: 1 },
  { key: 'sk-bench-critical-0123456789', tenant: 'crit', priority: 'critical' },
  { key: 'sk-bench-standard-0123456789', tenant: 'std', priority: 'standard' },
  { key: 'sk-bench-sheddable-0123456789', tenant: 'shed', priority: 'sheddable' },
  { key: 'sk-bench-interactive-0123456789', tenant: 'interactive' },
  { key: 'sk-bench-throughput-0123456789', tenant: 'throughput' },
];
const key = (tenant: string) => TENANTS.find((t) => t.tenant === tenant)?.key ?? '';

interface Run {
  loader: Loader;
  keysFile: string;
  seconds: number;
}

/** A fresh deployment with `queue`, warmed by `warmTenant`, handed to `use`, then stopped. */
async function withDeployment<T>(
  run: Run,
  queue: Partial<QueueSettings>,
  warmTenant: string,
  use: (d: Deployment) => Promise<T>,
): Promise<T> {
  const d = await Deployment.start(__filename, SHAPE, run.keysFile, queue);
  try {
    await d.warm(run.loader, key(warmTenant), SHAPE, MAX_TOKENS);
    return await use(d);
  } finally {
    await d.stop();
  }
}

function load(run: Run, d: Deployment, seconds: number, streams: LoadStream[]): Promise<StreamResult[]> {
  return run.loader.run({ base: d.base, model: MODEL, durationMs: seconds * 1000, drainMs: DRAIN_MS, streams });
}

async function fairness(run: Run): Promise<void> {
  const quiet = (): LoadStream => ({ name: 'Q (quiet)', key: key('quiet'), rps: 0.2 * CAPACITY, maxTokens: MAX_TOKENS });
  const heavy: LoadStream = { name: 'H (heavy, 10x Q)', key: key('heavy'), rps: 2 * CAPACITY, maxTokens: MAX_TOKENS };
  console.log(`\n1. fairness: Q at ${fixed(0.2 * CAPACITY)}/s; H at ${fixed(2 * CAPACITY)}/s, equal weights, a 256-request line`);
  const alone = await withDeployment(run, {}, 'quiet', (d) => load(run, d, run.seconds / 2, [quiet()]));
  console.log('  Q alone');
  alone.forEach((r) => console.log(streamLine(r)));
  const modes: Array<[string, Partial<QueueSettings>]> = [
    ['weighted', { fairness: 'weighted', maxPerModel: 256 }],
    ['fifo, no kept slots', { fairness: 'fifo', keptShare: 0, maxPerModel: 256 }],
  ];
  const p90Alone = percentile(byName(alone, 'Q (quiet)').ttfts, 90);
  const ratios: number[] = [];
  const quietRefused: number[] = [];
  for (const [label, queue] of modes) {
    const rs = await withDeployment(run, queue, 'heavy', (d) => load(run, d, run.seconds, [quiet(), heavy]));
    console.log(`  Q with H, --fairness ${label}`);
    rs.forEach((r) => console.log(streamLine(r)));
    const q = byName(rs, 'Q (quiet)');
    ratios.push(percentile(q.ttfts, 90) / p90Alone);
    quietRefused.push(refusals(q));
    console.log(`    Q p90 TTFT / alone: ${fixed(ratios[ratios.length - 1] ?? NaN, 2)}x; Q refused ${refusals(q)}`);
  }
  target(
    (ratios[0] ?? Infinity) <= TARGETS.fairRatio,
    `1  Q's p90 TTFT with H, weighted: ${fixed(ratios[0] ?? NaN, 2)}x alone (${fixed(p90Alone)} ms); fifo: ${fixed(ratios[1] ?? NaN, 2)}x (target weighted <= ${TARGETS.fairRatio}x)`,
  );
  // A p90 of the answered alone would hide a quiet tenant refused at a full line.
  target(quietRefused[0] === 0, `1  Q refused with H, weighted: ${quietRefused[0]}; fifo: ${quietRefused[1]} (target weighted 0)`);
}

async function weights(run: Run): Promise<void> {
  const connections = SHAPE.slots * 2;
  console.log(`\n2. weights 3:1: A (weight 3) and B (weight 1), ${connections} connections each, closed loop`);
  const rs = await withDeployment(run, {}, 'a', (d) =>
    load(run, d, run.seconds, [
      { name: 'A (weight 3)', key: key('a'), connections, maxTokens: MAX_TOKENS },
      { name: 'B (weight 1)', key: key('b'), connections, maxTokens: MAX_TOKENS },
    ]),
  );
  rs.forEach((r) => console.log(streamLine(r)));
  const [a, b] = [byName(rs, 'A (weight 3)'), byName(rs, 'B (weight 1)')];
  const share = a.throughput / b.throughput;
  console.log(`    together ${fixed(a.throughput + b.throughput)}/s (nominal capacity ${fixed(CAPACITY)}/s)`);
  target(
    Math.abs(share - TARGETS.weightShare) <= TARGETS.weightShare * TARGETS.weightTolerance,
    `1b A's throughput / B's: ${fixed(share, 2)} (target ${TARGETS.weightShare} within ${TARGETS.weightTolerance * 100} %)`,
  );
}

async function priorities(run: Run): Promise<void> {
  const critical = (): LoadStream => ({ name: 'critical (0.25x)', key: key('crit'), rps: 0.25 * CAPACITY, maxTokens: MAX_TOKENS });
  console.log('\n3. priorities at 2x capacity: critical 0.25x, standard 0.5x, sheddable 1.25x, a 32-request line');
  for (const keptShare of KEPT_SHARES) {
    console.log(`  --kept-slots ${keptShare} (${Math.floor(SHAPE.slots * keptShare)} of ${SHAPE.slots} slots)`);
    await withDeployment(run, { maxPerModel: 32, keptShare }, 'crit', async (d) => {
      const unloaded = await load(run, d, run.seconds / 2, [critical()]);
      unloaded.forEach((r) => console.log(streamLine({ ...r, name: 'critical alone' })));
      const heldBefore = heldAtRouter(await d.metrics(), 'critical');
      const rs = await load(run, d, run.seconds, [
        critical(),
        { name: 'standard (0.5x)', key: key('std'), rps: 0.5 * CAPACITY, maxTokens: MAX_TOKENS },
        { name: 'sheddable (1.25x)', key: key('shed'), rps: 1.25 * CAPACITY, maxTokens: MAX_TOKENS },
      ]);
      rs.forEach((r) => console.log(streamLine(r)));
      const [crit, std, shed] = [byName(rs, 'critical (0.25x)'), byName(rs, 'standard (0.5x)'), byName(rs, 'sheddable (1.25x)')];
      // Whether a critical request's wait was the router's line or elsewhere (a core, the engine).
      const heldAfter = heldAtRouter(await d.metrics(), 'critical');
      const held = heldAfter.count - heldBefore.count;
      const heldMs = held > 0 ? ((heldAfter.sum - heldBefore.sum) / held) * 1000 : 0;
      console.log(`    critical: ${held} of ${crit.sent} held at the router before sending, ${fixed(heldMs)} ms on average`);
      const p90u = percentile(byName(unloaded, 'critical (0.25x)').ttfts, 90);
      const ratio = percentile(crit.ttfts, 90) / p90u;
      const at = `kept ${keptShare}:`;
      target(
        ratio <= TARGETS.criticalRatio,
        `2  ${at} critical p90 TTFT at 2x: ${fixed(ratio, 2)}x unloaded (${fixed(p90u)} ms) (target <= ${TARGETS.criticalRatio}x)`,
      );
      target(refusals(crit) === 0, `2  ${at} critical refused: ${refusals(crit)} (target 0)`);
      target(
        refusals(std) === 0 && refusals(shed) > 0,
        `2  ${at} refused by priority: sheddable ${refusals(shed)}, standard ${refusals(std)} (target: sheddable first, standard 0)`,
      );
    });
  }
}

async function deadlines(run: Run): Promise<void> {
  const connections = SHAPE.slots * 3;
  console.log(`\n4. deadlines: tenant I with deadlines while tenant T keeps ${connections} connections busy (closed loop)`);
  await withDeployment(run, {}, 'throughput', async (d) => {
    const alone = await load(run, d, run.seconds / 2, [{ name: 'I alone', key: key('interactive'), rps: 8, maxTokens: MAX_TOKENS }]);
    alone.forEach((r) => console.log(streamLine(r)));
    const feasibleMs = Math.ceil(2 * percentile(byName(alone, 'I alone').ttfts, 50));
    const rs = await load(run, d, run.seconds, [
      { name: 'T (saturating)', key: key('throughput'), connections, maxTokens: MAX_TOKENS },
      { name: `I feasible ${feasibleMs} ms`, key: key('interactive'), rps: 4, maxTokens: MAX_TOKENS, ttftDeadlineMs: feasibleMs },
      { name: 'I infeasible 1 ms', key: key('interactive'), rps: 4, maxTokens: MAX_TOKENS, ttftDeadlineMs: 1 },
    ]);
    rs.forEach((r) => console.log(streamLine(r)));
    const feasible = byName(rs, `I feasible ${feasibleMs} ms`);
    const infeasible = byName(rs, 'I infeasible 1 ms');
    const ms = infeasible.refusedMs;
    const admittedOk = (feasible.metDeadline + infeasible.metDeadline) / (feasible.ttfts.length + infeasible.ttfts.length);
    console.log(
      `    infeasible: ${refusals(infeasible)} of ${infeasible.sent} refused; feasible: ${feasible.ttfts.length} of ${feasible.sent} admitted, ` +
        `${feasible.metDeadline} met, ${refusals(feasible)} refused`,
    );
    target(
      ms.length > 0 && Math.max(...ms) <= TARGETS.refusalMaxMs,
      `3  time to the 429 of an infeasible deadline: p50 ${fixed(percentile(ms, 50))} ms, p99 ${fixed(percentile(ms, 99))} ms, ` +
        `max ${fixed(ms.length ? Math.max(...ms) : NaN)} ms (target max <= ${TARGETS.refusalMaxMs} ms)`,
    );
    target(
      admittedOk >= TARGETS.deadlinesMet,
      `3  admitted requests that met their deadline: ${fixed(admittedOk * 100)} % (target >= ${TARGETS.deadlinesMet * 100} %)`,
    );
    console.log('  router prediction error (admin /metrics):');
    for (const line of predictionError(await d.metrics())) console.log(line);
  });
}

async function main(): Promise<void> {
  const seconds = numberFlag('--seconds', 15);
  // One phase only (1 to 4); 0, the default, runs them all.
  const only = numberFlag('--phase', 0, 0);
  const scratch = mkdtempSync(join(os.tmpdir(), 'llmgw-bench-fairness-'));
  const keysFile = join(scratch, 'keys');
  writeFileSync(keysFile, TENANTS.map((t) => JSON.stringify({ id: t.tenant, ...t })).join('\n') + '\n', { mode: 0o600 });
  const cpus = os.cpus();
  console.log(
    `fairness benchmark: ${cpus.length} CPUs (${cpus[0]?.model ?? 'unknown'}), node ${process.version}, load ${fixed(os.loadavg()[0] ?? NaN)}; ` +
      `one engine of ${SHAPE.slots} slots at ${SHAPE.tokensPerSecond} tokens/s, ${MAX_TOKENS}-token streamed answers: ` +
      `capacity about ${fixed(CAPACITY)} requests/s; phases of ${seconds} s (unloaded ones ${seconds / 2} s)`,
  );
  const loader = await Loader.start(__filename);
  try {
    const run = { loader, keysFile, seconds };
    const phases = [fairness, weights, priorities, deadlines];
    for (const [i, phase] of phases.entries()) if (only === 0 || only === i + 1) await phase(run);
    summary();
    if (cpus.length < 3)
      console.log(`\nnote: ${cpus.length} CPUs for 3 busy processes (engine, router, load): times include waiting for a core.`);
  } finally {
    await loader.stop();
    rmSync(scratch, { recursive: true, force: true });
  }
}

runMainOrRole('bench:fairness', main, fairnessRole);
