// npm run bench:fleet — does the control plane hold a fleet? A simulated fleet in one
// process (default 200 hosts of 8×H100: 1,600 GPUs), two control workers, 400 replicas of
// TP1/TP2/TP4/TP8 over several deployments; then the steady state's cost over a window, one
// host killed, and a rack of 20 killed at once. Prints one table and, last, the `fleet:` line.
// Figures, never asserts: a missed goal is printed with the rest.
import { parseArgs } from 'node:util';
import { z } from 'zod';
import type { NodeView } from '../common/node-types.js';
import { newTable } from '../cli/actions/table.js';
import { gpusHeldTwice } from '../sim/double-held.js';
import {
  actionsBetween,
  countOf,
  cpuSecondsOf,
  eventsInWindow,
  summariseEvents,
  machineBusySeconds,
  percentile,
  placementLatencies,
  reserveRejections,
  rssMb,
  serverActions,
} from './fleet-measure.js';
import { markProfiles, stopEverythingStarted } from './stack.js';
import { startFleetStack } from './fleet-stack.js';
import {
  busiest,
  cpuSplit,
  errorText,
  nodeDown,
  READY_REPLICAS,
  replacedAfterKill,
  seconds,
  sleep,
  snapshot,
  until,
  type EngineRow,
} from './fleet-phases.js';

const Options = z.object({
  hosts: z.coerce.number().int().min(2).default(200),
  replicas: z.coerce.number().int().min(1).default(400),
  /** Share of the replicas per tensor-parallel size, in percent. */
  mix: z
    .string()
    .regex(/^[1248]:\d+(,[1248]:\d+)*$/)
    .default('1:40,2:30,4:20,8:10'),
  perDeployment: z.coerce.number().int().min(1).default(60),
  gpus: z.string().default('builtin:h100x8'),
  workers: z.coerce.number().int().min(1).default(2),
  temporal: z.enum(['dev', 'postgres']).default('dev'),
  settle: z.coerce.number().min(0).default(30),
  window: z.coerce.number().min(10).default(180),
  rack: z.coerce.number().int().min(1).default(20),
  lostGraceSeconds: z.coerce.number().int().min(1).default(60),
  /** Bound of each phase (deploy, each kill's recovery), in seconds. */
  timeout: z.coerce.number().min(10).default(600),
});
type Options = z.infer<typeof Options>;

const say = (line: string): void => void process.stderr.write(`bench:fleet ${new Date().toISOString().slice(11, 19)} ${line}\n`);

function deployments(options: Options): { name: string; model: string; replicas: number; tp: number }[] {
  const shares = options.mix.split(',').map((pair) => pair.split(':').map(Number) as [number, number]);
  const total = shares.reduce((sum, [, share]) => sum + share, 0);
  let left = options.replicas;
  const out: { name: string; model: string; replicas: number; tp: number }[] = [];
  shares.forEach(([tp, share], i) => {
    const count = i === shares.length - 1 ? left : Math.round((options.replicas * share) / total);
    left -= count;
    const parts = Math.ceil(count / options.perDeployment);
    for (let j = 0; j < parts; j++) {
      const replicas = Math.floor(count / parts) + (j < count % parts ? 1 : 0);
      if (replicas > 0) out.push({ name: `fleet-tp${tp}-${j + 1}`, model: `fleet-tp${tp}`, replicas, tp });
    }
  });
  return out;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: Object.fromEntries(
      [
        'hosts',
        'replicas',
        'mix',
        'per-deployment',
        'gpus',
        'workers',
        'temporal',
        'settle',
        'window',
        'rack',
        'lost-grace-seconds',
        'timeout',
      ].map((name) => [name, { type: 'string' as const }]),
    ),
  });
  const options = Options.parse(
    Object.fromEntries(Object.entries(values).map(([k, v]) => [k.replace(/-(\w)/g, (_, c: string) => c.toUpperCase()), v])),
  );
  const plan = deployments(options);
  const hostIds = Array.from({ length: options.hosts }, (_, i) => `fleet-${i}`);
  say(
    `${options.hosts} hosts, ${options.replicas} replicas in ${plan.length} deployments (${plan.map((d) => `${d.name}×${d.replicas}`).join(', ')})`,
  );
  // Ctrl-C (or a timeout's SIGTERM) while the stack starts: undo what was started, and go.
  const early = (): void => void stopEverythingStarted().finally(() => process.exit(1));
  process.once('SIGINT', early);
  process.once('SIGTERM', early);
  const stack = await startFleetStack({
    temporal: options.temporal,
    workers: options.workers,
    fleetArgs: [
      '--hosts',
      String(options.hosts),
      '--gpus',
      options.gpus,
      '--node-prefix',
      'fleet-',
      '--lost-grace-seconds',
      String(options.lostGraceSeconds),
    ],
  });
  const rows: [string, string, string][] = [];
  const keys =
    'ready_s placement_p50_ms placement_p99_ms reserve_rejections events_per_host_hour actions_per_host_hour events_per_ready_replica_hour dead_host_detect_s rack_loss_replaced_s worker_rss_mb fleet_rss_mb gpus_double_held';
  // Every figure is printed, measured or not: a run that stopped early still says how far it got.
  const figures: Record<string, number | string> = { hosts: options.hosts, replicas: options.replicas };
  for (const key of keys.split(' ')) figures[key] = 'n/a';
  let failure: unknown;
  // From here Ctrl-C (or a timeout's SIGTERM) tears the stack down and prints what was measured.
  process.off('SIGINT', early);
  process.off('SIGTERM', early);
  const interrupted = new Promise<never>((_, reject) => {
    for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => reject(new Error(`interrupted (${signal})`)));
  });
  let doubles = 0;
  let seen: { nodes: NodeView[]; engines: EngineRow[] } = { nodes: [], engines: [] };
  const checkDoubles = async (phase: string): Promise<void> => {
    seen = await snapshot(stack, hostIds);
    const problems = gpusHeldTwice(seen.nodes, seen.engines);
    doubles += problems.length;
    rows.push([`GPUs held twice (${phase})`, String(problems.length), '0']);
    for (const p of problems.slice(0, 5)) say(`held twice: ${p}`);
  };
  const phases = async (): Promise<void> => {
    say(`${stack.temporal.what}; ${options.workers} control worker(s); sim-fleet up (log ${stack.logFile})`);
    await until('every node Ready', options.timeout, async () =>
      (await countOf(stack.client, `WorkflowType = 'node' AND ExecutionStatus = 'Running' AND LlmgwState = 'Ready'`)) >= options.hosts
        ? true
        : undefined,
    );
    // Every registration is reconciled; a fleet that has just come up reconciles every host at
    // once. Deploys are measured on a settled fleet, as an operator's would be.
    const settling = Date.now();
    await until('every registration reconciled', options.timeout, async () =>
      (await countOf(stack.client, `WorkflowType = 'reconcileNode' AND ExecutionStatus = 'Running'`)) === 0 ? true : undefined,
    );
    rows.push(['fleet up → registrations reconciled', `${seconds(Date.now() - settling)} s more`, '']);

    const cpu = async (): Promise<number[]> => [
      await machineBusySeconds(),
      ...(await Promise.all([...stack.workers.map((w) => w.pid!), stack.fleetPid, stack.enginesPid].map(cpuSecondsOf))),
    ];
    const cpuBefore = await cpu();
    const actionsBefore = await serverActions(stack.temporal.metricsUrl, stack.temporal.namespace);
    const began = Date.now();
    await Promise.all(
      plan.map((d) =>
        stack.client.workflow.start('deployModel', {
          workflowId: `deployment/${d.name}`,
          taskQueue: 'llmgw',
          args: [{ model: d.model, name: d.name, replicas: d.replicas }],
        }),
      ),
    );
    await until('every replica Ready', options.timeout, async () => {
      const ready = await countOf(stack.client, READY_REPLICAS);
      return ready >= options.replicas ? ready : undefined;
    });
    figures.ready_s = seconds(Date.now() - began);
    const profiled = [...stack.workers.map((w) => w.pid!), stack.fleetPid, stack.enginesPid];
    markProfiles(profiled);
    rows.push(['deploy start → all Ready', `${figures.ready_s} s`, '≤ 120 s']);
    rows.push(['  per replica', `${Math.round((Date.now() - began) / options.replicas)} ms`, 'flat with fleet size']);
    // Where the machine's cores went while deploying: what bounds ready_s on a small machine.
    const spent = (await cpu()).map((after, i) => after - cpuBefore[i]!);
    rows.push(['  CPU while deploying', cpuSplit(spent, stack.workers.length, (Date.now() - began) / 1000), '']);
    // What each replica cost Temporal to deploy, queries included (they are billed too).
    const deployActions = actionsBetween(actionsBefore, await serverActions(stack.temporal.metricsUrl, stack.temporal.namespace));
    const perReplica = (n: number): string => (n / options.replicas).toFixed(1);
    const deployTotal = [...deployActions.values()].reduce((a, b) => a + b, 0);
    rows.push(['  billed actions / replica deployed', perReplica(deployTotal), '']);
    for (const [type, n] of [...deployActions].sort((a, b) => b[1] - a[1]).slice(0, 8)) rows.push([`    ${type}`, perReplica(n), '']);
    // What the deploy wrote, by workflow and event: where a replica's cost goes.
    const deployEvents = await eventsInWindow(stack.client, began - 1_000, Date.now());
    const deployTotalEvents = [...deployEvents.byType.values()].reduce((a, b) => a + b, 0);
    rows.push(['  history events / replica deployed', perReplica(deployTotalEvents), '']);
    for (const [type, n] of [...deployEvents.byType].sort((a, b) => b[1] - a[1])) rows.push([`    ${type}`, perReplica(n), '']);
    for (const [kind, n] of [...deployEvents.byKind].sort((a, b) => b[1] - a[1]).slice(0, 12))
      rows.push([`    ${kind}`, perReplica(n), '']);
    await checkDoubles('deployed');
    const latencies = await placementLatencies(stack.client);
    figures.placement_p50_ms = percentile(latencies, 50);
    figures.placement_p99_ms = percentile(latencies, 99);
    rows.push([
      'placeReplica p50 / p99',
      `${figures.placement_p50_ms} / ${figures.placement_p99_ms} ms (${latencies.length} placements)`,
      '',
    ]);
    const reserves = await reserveRejections(stack.client);
    figures.reserve_rejections = reserves.rejected;
    rows.push(['reserve Updates rejected', `${reserves.rejected} of ${reserves.reserves}`, '']);

    say(`steady state: settling ${options.settle} s, then a ${options.window} s window`);
    await sleep(options.settle * 1000);
    const before = await serverActions(stack.temporal.metricsUrl, stack.temporal.namespace);
    const steadyCpuBefore = await cpu();
    const from = Date.now();
    await sleep(options.window * 1000);
    const after = await serverActions(stack.temporal.metricsUrl, stack.temporal.namespace);
    const steadyCpu = (await cpu()).map((end, i) => end - steadyCpuBefore[i]!);
    markProfiles(profiled);
    const to = Date.now();
    const hours = (to - from) / 3_600_000;
    const actions = actionsBetween(before, after);
    const { byType: events, replicas: busyReplicas } = await eventsInWindow(stack.client, from, to);
    const readyNow = await countOf(stack.client, READY_REPLICAS);
    const sum = (m: Map<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);
    const perHostHour = (n: number): number => Math.round(n / options.hosts / hours);
    figures.events_per_host_hour = perHostHour(sum(events));
    figures.actions_per_host_hour = perHostHour(sum(actions));
    figures.events_per_ready_replica_hour = Math.round((events.get('replica') ?? 0) / Math.max(1, readyNow) / hours);
    const window = `${new Date(from).toISOString().slice(11, 19)}–${new Date(to).toISOString().slice(11, 19)} UTC`;
    rows.push([`steady window`, `${seconds(to - from)} s (${window}), ${readyNow} Ready`, '']);
    rows.push(['  CPU while steady', cpuSplit(steadyCpu, stack.workers.length, (to - from) / 1000), '']);
    rows.push(['history events / host-hour', `${figures.events_per_host_hour}`, '']);
    for (const [type, n] of [...events].sort((a, b) => b[1] - a[1])) rows.push([`  ${type}`, `${perHostHour(n)}`, '']);
    rows.push(['billed actions / host-hour', `${figures.actions_per_host_hour}`, '≤ 120']);
    for (const [type, n] of [...actions].sort((a, b) => b[1] - a[1]).slice(0, 8)) rows.push([`  ${type}`, `${perHostHour(n)}`, '']);
    rows.push(['replica events / Ready replica-hour', `${figures.events_per_ready_replica_hour}`, '0']);
    // Which replicas wrote them, and what: a replica still settling reads differently from a loop.
    for (const busy of busyReplicas.slice(0, 5)) rows.push([`  ${busy.workflowId}`, summariseEvents(busy.events), '']);
    const workerRss = await Promise.all(stack.workers.map((w) => rssMb(w.pid!)));
    figures.worker_rss_mb = Math.max(...workerRss);
    figures.fleet_rss_mb = (await rssMb(stack.fleetPid)) + (await rssMb(stack.enginesPid));
    rows.push(['control worker RSS', `${workerRss.join(' / ')} MiB`, '']);
    rows.push(['sim-fleet + engine host RSS', `${await rssMb(stack.fleetPid)} + ${await rssMb(stack.enginesPid)} MiB`, '']);
    await checkDoubles('steady');

    const busy = busiest(seen.engines);
    const victim = busy[0]!;
    const killedAt = Date.now();
    const replaced = replacedAfterKill(stack, [victim], options.replicas, options.timeout);
    await until(`${victim} NotReady`, options.timeout, async () => ((await nodeDown(stack.client, victim)) ? true : undefined));
    figures.dead_host_detect_s = seconds(Date.now() - killedAt);
    rows.push([`one host killed (${victim}) → NotReady`, `${figures.dead_host_detect_s} s`, '≤ 30 s']);
    rows.push(['  → its replicas Ready elsewhere', `${seconds(await replaced)} s`, '']);
    await checkDoubles('host lost');

    const rack = busy.filter((id) => id !== victim).slice(0, options.rack);
    const needed = plan.reduce((sum, d) => sum + d.tp * d.replicas, 0);
    const left = seen.nodes
      .filter((n) => ![victim, ...rack].includes(n.nodeId))
      .reduce((sum, n) => sum + (n.inventory?.gpus.length ?? 0), 0);
    if (needed > left) {
      rows.push([`${rack.length} hosts killed at once`, `not run: ${needed} GPUs needed, ${left} left`, '≤ 120 s']);
    } else {
      figures.rack_loss_replaced_s = seconds(await replacedAfterKill(stack, rack, options.replicas, options.timeout));
      rows.push([`${rack.length} hosts killed at once → all Ready elsewhere`, `${figures.rack_loss_replaced_s} s`, '≤ 120 s']);
      await checkDoubles('rack lost');
    }
  };
  try {
    await Promise.race([phases(), interrupted]);
  } catch (error) {
    failure = error;
  } finally {
    figures.gpus_double_held = doubles;
    await stack.stop().catch((error: unknown) => say(`teardown: ${String(error)}`));
  }
  const table = newTable({ head: ['measure', 'figure', 'goal'] });
  table.push(...rows);
  console.log(
    `bench:fleet — ${options.hosts} simulated hosts (${options.gpus}), ${options.workers} control worker(s), Temporal ${options.temporal}`,
  );
  console.log(table.toString());
  if (failure) console.log(`stopped early: ${errorText(failure)}`);
  console.log(
    `fleet: ${Object.entries(figures)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ')}`,
  );
  process.exit(failure ? 1 : 0);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
