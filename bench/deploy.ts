// npm run bench:deploy — how long the control plane takes from a deployModel start to
// every replica Ready, with the fake engine's load time at 0: for 1 replica on 1 host
// and 32 replicas over 8 simulated hosts. Prints the median of each phase (placement,
// start, healthy) and the Temporal history events per replica. Figures, not asserts.
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery } from '../workflows/definitions.js';
import { startStack, type Stack } from './stack.js';

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.floor(sorted.length / 2)]! : NaN;
}

async function phases(client: Client, replicaId: string): Promise<{ placement: number; start: number; healthy: number; events: number }> {
  const history = await client.workflow.getHandle(replicaId).fetchHistory();
  const events = history.events ?? [];
  const time = (event: (typeof events)[number]): number =>
    Number(event.eventTime?.seconds ?? 0) * 1000 + Math.round((event.eventTime?.nanos ?? 0) / 1e6);
  const span = (activity: string): number => {
    const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === activity);
    if (!scheduled) return NaN;
    const completed = events.find(
      (e) =>
        e.activityTaskCompletedEventAttributes &&
        Number(e.activityTaskCompletedEventAttributes.scheduledEventId) === Number(scheduled.eventId),
    );
    return completed ? time(completed) - time(scheduled) : NaN;
  };
  return { placement: span('placeReplica'), start: span('startShard'), healthy: span('waitHealthy'), events: events.length };
}

async function run(stack: Stack, replicas: number): Promise<void> {
  const client = stack.client;
  const name = `bench-${replicas}-${Date.now().toString(36)}`;
  const started = Date.now();
  await client.workflow.start('deployModel', {
    workflowId: `deployment/${name}`,
    taskQueue: 'llmgw',
    args: [{ model: 'bench', replicas }],
  });
  for (;;) {
    const view = await client.workflow
      .getHandle(`deployment/${name}`)
      .query(deploymentStatusQuery)
      .catch(() => undefined);
    if (view?.phase === 'Ready') break;
    if (Date.now() - started > 300_000) throw new Error(`${name} not Ready after 300 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const total = Date.now() - started;
  const measured = await Promise.all(Array.from({ length: replicas }, (_, i) => phases(client, `replica/${name}/${i + 1}`)));
  console.log(
    `${String(replicas).padStart(2)} replica(s): all Ready in ${(total / 1000).toFixed(2)} s · median placement ${median(measured.map((m) => m.placement))} ms, start ${median(measured.map((m) => m.start))} ms, healthy ${median(measured.map((m) => m.healthy))} ms · ${median(measured.map((m) => m.events))} history events per replica (median, until Ready)`,
  );
  await stack.llmgw(['undeploy', name]);
}

async function main(): Promise<void> {
  const stack = await startStack({ hosts: 8 });
  try {
    console.log('deploy benchmark: fake engine, load time 0, 8 simulated 8×H100 hosts, dev server in memory, 2-core machine');
    await run(stack, 1);
    await run(stack, 32);
  } finally {
    await stack.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
