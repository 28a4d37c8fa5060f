// What bench:fleet reads back from Temporal: the server's `action` counter (the events
// Temporal Cloud bills, as the server itself counts them), workflow histories (events in a
// window, placement latencies, rejected reserves) and visibility counts. Benchmark side;
// nothing here is billed (history and visibility reads are not actions).
import type { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { temporal } from '@temporalio/proto';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** The server's `action` counter by action_type, for one namespace. */
export async function serverActions(metricsUrl: string, namespace: string): Promise<Map<string, number>> {
  const text = await (await fetch(metricsUrl)).text();
  const counts = new Map<string, number>();
  for (const line of text.split('\n')) {
    const match = /^action(?:_total)?\{([^}]*)\}\s+([0-9.e+]+)/.exec(line);
    if (!match) continue;
    const labels = Object.fromEntries([...match[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (labels.namespace !== namespace || !labels.action_type) continue;
    counts.set(labels.action_type, (counts.get(labels.action_type) ?? 0) + Number(match[2]));
  }
  return counts;
}

/**
 * Billed actions between two readings. Markers are billed per batch (one workflow task's
 * markers are one action), so the per-marker counts the server also emits are left out.
 */
export function actionsBetween(before: Map<string, number>, after: Map<string, number>): Map<string, number> {
  const delta = new Map<string, number>();
  for (const [type, count] of after) {
    if (type.startsWith('command_RecordMarker')) continue;
    const d = count - (before.get(type) ?? 0);
    if (d > 0) delta.set(type, d);
  }
  return delta;
}

export function eventTimeMs(event: HistoryEvent): number {
  return Number(event.eventTime?.seconds ?? 0) * 1000 + Math.round((event.eventTime?.nanos ?? 0) / 1e6);
}

export async function inParallel<T, R>(items: T[], lanes: number, each: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(lanes, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await each(items[i]!);
      }
    }),
  );
  return results;
}

export async function executions(client: Client, query: string): Promise<WorkflowExecutionInfo[]> {
  const found: WorkflowExecutionInfo[] = [];
  for await (const execution of client.workflow.list({ query })) found.push(execution);
  return found;
}

export async function historyOf(client: Client, execution: WorkflowExecutionInfo): Promise<HistoryEvent[]> {
  const history = await client.workflow.getHandle(execution.workflowId, execution.runId).fetchHistory();
  return history.events ?? [];
}

/** Every placeReplica activity of these workflows: scheduled → completed, in ms. */
export async function placementLatencies(client: Client): Promise<number[]> {
  const replicas = await executions(client, `WorkflowType = 'replica'`);
  const spans = await inParallel(replicas, 8, async (execution) => {
    const events = await historyOf(client, execution);
    const scheduled = new Map<number, number>();
    const out: number[] = [];
    for (const event of events) {
      const attrs = event.activityTaskScheduledEventAttributes;
      if (attrs?.activityType?.name === 'placeReplica') scheduled.set(Number(event.eventId), eventTimeMs(event));
      const done = event.activityTaskCompletedEventAttributes;
      const at = done ? scheduled.get(Number(done.scheduledEventId)) : undefined;
      if (at !== undefined) out.push(eventTimeMs(event) - at);
    }
    return out;
  });
  return spans.flat();
}

export function decodeJson(payload: temporal.api.common.v1.IPayload | undefined): unknown {
  if (!payload?.data) return undefined;
  const encoding = Buffer.from(payload.metadata?.encoding ?? new Uint8Array()).toString();
  if (encoding !== 'json/plain') return undefined;
  return JSON.parse(Buffer.from(payload.data).toString('utf8')) as unknown;
}

/** Node workflows' `reserve` Updates (every run) that answered ok: false. */
export async function reserveRejections(client: Client): Promise<{ reserves: number; rejected: number }> {
  const nodes = await executions(client, `WorkflowType = 'node'`);
  const counts = await inParallel(nodes, 8, async (execution) => {
    const events = await historyOf(client, execution);
    const names = new Map<string, string>();
    let reserves = 0;
    let rejected = 0;
    for (const event of events) {
      const accepted = event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest;
      if (accepted?.meta?.updateId) names.set(accepted.meta.updateId, accepted.input?.name ?? '');
      const completed = event.workflowExecutionUpdateCompletedEventAttributes;
      if (!completed?.meta?.updateId || names.get(completed.meta.updateId) !== 'reserve') continue;
      reserves++;
      const result = decodeJson(completed.outcome?.success?.payloads?.[0]) as { ok?: boolean } | undefined;
      if (completed.outcome?.failure || result?.ok === false) rejected++;
    }
    return { reserves, rejected };
  });
  return counts.reduce((a, b) => ({ reserves: a.reserves + b.reserves, rejected: a.rejected + b.rejected }), { reserves: 0, rejected: 0 });
}

/** History events written in [from, to), by workflow type, over every run that was open then. */
export interface WindowEvents {
  byType: Map<string, number>;
  /** The replica runs that wrote any, with what they wrote: a steady replica should write none. */
  replicas: { workflowId: string; events: string[] }[];
  /** "replica UPSERT_WORKFLOW_SEARCH_ATTRIBUTES" → count: what each workflow type wrote. */
  byKind: Map<string, number>;
}

const eventName = (e: HistoryEvent): string =>
  temporal.api.enums.v1.EventType[e.eventType ?? 0]?.replace('EVENT_TYPE_', '') ?? String(e.eventType);

export async function eventsInWindow(client: Client, from: number, to: number): Promise<WindowEvents> {
  const since = new Date(from).toISOString();
  const runs = await executions(client, `ExecutionStatus = 'Running' OR CloseTime >= '${since}'`);
  const counted = await inParallel(runs, 8, async (execution) => {
    const events = (await historyOf(client, execution)).filter((e) => eventTimeMs(e) >= from && eventTimeMs(e) < to);
    return { execution, events };
  });
  const byType = new Map<string, number>();
  const byKind = new Map<string, number>();
  const replicas: WindowEvents['replicas'] = [];
  for (const { execution, events } of counted) {
    byType.set(execution.type, (byType.get(execution.type) ?? 0) + events.length);
    const names = events.map(eventName);
    for (const name of names) byKind.set(`${execution.type} ${name}`, (byKind.get(`${execution.type} ${name}`) ?? 0) + 1);
    if (execution.type === 'replica' && events.length) replicas.push({ workflowId: execution.workflowId, events: names });
  }
  return { byType, replicas, byKind };
}

export async function countOf(client: Client, query: string): Promise<number> {
  return (await client.workflow.count(query)).count;
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Resident memory of a process, in MiB (0 when it is gone). */
export async function rssMb(pid: number): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return Math.round(kb / 1024);
}

/** CPU seconds one process (and its reaped children) has used so far. */
export async function cpuSecondsOf(pid: number): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  // Fields after the command name (which may hold spaces): utime is the 14th field overall.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i] ?? 0), 0);
  return ticks / 100;
}

/** CPU seconds the whole machine has spent busy (not idle or waiting on I/O) so far. */
export async function machineBusySeconds(): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  const [, ...values] = (await readFile('/proc/stat', 'utf8')).split('\n')[0]!.trim().split(/\s+/);
  const [user, nice, system, , , irq, softirq, steal] = values.map(Number);
  return (user! + nice! + system! + irq! + softirq! + steal!) / 100;
}

/** "2 × WORKFLOW_TASK_SCHEDULED, 1 × TIMER_STARTED": event names counted, most first. */
export function summariseEvents(names: string[]): string {
  const counts = new Map<string, number>();
  for (const name of names) counts.set(name, (counts.get(name) ?? 0) + 1);
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .map(([name, n]) => `${n} × ${name}`)
    .join(', ');
}
