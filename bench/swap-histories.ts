// bench:swap's reading of Temporal histories after the traffic: each wake as its replica recorded
// it (the wakeReplica Update, accepted → completed), each replica start as its deployment recorded
// it, and each request matched to the wake or start it waited for. Figures, not asserts.
import type { Client } from '@temporalio/client';
import { decodeJson, eventTimeMs, executions, historyOf, inParallel } from './fleet-measure.js';
import type { SentRequest } from './swap-traffic.js';

/** A wake of one replica: when its Update was accepted and answered, and what it answered. */
export interface RecordedWake {
  replicaId: string;
  model: string;
  acceptedAt: number;
  /** When its engines were asked to wake (the first wakeShard scheduled): room on the GPU found. */
  engineWakeAt?: number;
  completedAt: number;
  by: string;
  /** The replica's own measure (WakeResult.wokeInMs); undefined when the Update failed. */
  wokeInMs?: number;
  alreadyAwake: boolean;
}

/** A sleep of one replica: who asked (autoscaler:…, replica:… making room, bench:…) and how long it took. */
export interface RecordedSleep {
  by: string;
  acceptedAt: number;
  completedAt: number;
}

/** Every wakeReplica and sleepReplica Update in every run of the replicas of these deployments. */
export async function recordedWakes(
  client: Client,
  deployments: { name: string; model: string }[],
): Promise<{ wakes: RecordedWake[]; sleeps: RecordedSleep[] }> {
  const perDeployment = await inParallel(deployments, 4, async ({ name, model }) => {
    const runs = await executions(client, `WorkflowType = 'replica' AND WorkflowId STARTS_WITH 'replica/${name}/'`);
    const perRun = await inParallel(runs, 4, async (run) => {
      const accepted = new Map<string, { at: number; by: string; name: string; engineWakeAt?: number }>();
      const wakes: RecordedWake[] = [];
      const sleeps: RecordedSleep[] = [];
      for (const event of await historyOf(client, run)) {
        const request = event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest;
        const name = request?.input?.name ?? '';
        if ((name === 'wakeReplica' || name === 'sleepReplica') && request?.meta?.updateId) {
          const input = decodeJson(request.input?.args?.payloads?.[0]) as { by?: string } | undefined;
          accepted.set(request.meta.updateId, { at: eventTimeMs(event), by: input?.by ?? '', name });
        }
        // Wakes under way share one engine wake: each open one takes the first wakeShard after it.
        if (event.activityTaskScheduledEventAttributes?.activityType?.name === 'wakeShard') {
          for (const open of accepted.values()) if (open.name === 'wakeReplica') open.engineWakeAt ??= eventTimeMs(event);
        }
        const completed = event.workflowExecutionUpdateCompletedEventAttributes;
        const start = completed?.meta?.updateId ? accepted.get(completed.meta.updateId) : undefined;
        if (!completed || !start) continue;
        accepted.delete(completed.meta!.updateId!);
        if (start.name === 'sleepReplica') {
          if (!completed.outcome?.failure) sleeps.push({ by: start.by, acceptedAt: start.at, completedAt: eventTimeMs(event) });
          continue;
        }
        const result = decodeJson(completed.outcome?.success?.payloads?.[0]) as { wokeInMs?: number; alreadyAwake?: boolean } | undefined;
        wakes.push({
          replicaId: run.workflowId,
          model,
          acceptedAt: start.at,
          engineWakeAt: start.engineWakeAt,
          completedAt: eventTimeMs(event),
          by: start.by,
          wokeInMs: result?.wokeInMs,
          alreadyAwake: result?.alreadyAwake === true,
        });
      }
      return { wakes, sleeps };
    });
    return { wakes: perRun.flatMap((r) => r.wakes), sleeps: perRun.flatMap((r) => r.sleeps) };
  });
  return {
    wakes: perDeployment.flatMap((d) => d.wakes).sort((a, b) => a.acceptedAt - b.acceptedAt),
    sleeps: perDeployment.flatMap((d) => d.sleeps).sort((a, b) => a.acceptedAt - b.acceptedAt),
  };
}

/** A replica started for a request (no sleep): its workflow's start, and when its engine was started (a GPU found). */
export interface RecordedStart {
  model: string;
  startedAt: number;
  engineStartAt?: number;
}

/** Each replica of these deployments: when its workflow started and when it first asked its agent to start an engine. */
export async function replicaStarts(client: Client, deployments: { name: string; model: string }[]): Promise<RecordedStart[]> {
  const perDeployment = await inParallel(deployments, 4, async ({ name, model }) => {
    const runs = await executions(client, `WorkflowType = 'replica' AND WorkflowId STARTS_WITH 'replica/${name}/'`);
    const byReplica = new Map<string, RecordedStart>();
    for (const run of runs.sort((x, y) => x.startTime.getTime() - y.startTime.getTime())) {
      const start = byReplica.get(run.workflowId) ?? { model, startedAt: run.startTime.getTime() };
      byReplica.set(run.workflowId, start);
      if (start.engineStartAt !== undefined) continue;
      const scheduled = (await historyOf(client, run)).find(
        (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'startShard',
      );
      if (scheduled) start.engineStartAt = eventTimeMs(scheduled);
    }
    return [...byReplica.values()];
  });
  return perDeployment.flat().sort((a, b) => a.startedAt - b.startedAt);
}

/**
 * For each moment a model became able to serve again (a wake's acceptance, a replica's start),
 * the first request of that model answered after it: the time from that moment to its first
 * token, among the requests sent by `sentBy` (those that waited for it). A moment no request
 * waited for (a wake by the autoscaler, say) gives nothing.
 */
export function toFirstToken(moments: { model: string; at: number; sentBy: number }[], requests: SentRequest[]): number[] {
  const answered = requests.filter((r) => r.firstTokenAt !== undefined).sort((a, b) => a.firstTokenAt! - b.firstTokenAt!);
  const out: number[] = [];
  for (const moment of moments) {
    const first = answered.find((r) => r.model === moment.model && r.firstTokenAt! > moment.at && r.sentAt <= moment.sentBy);
    if (first) out.push(first.firstTokenAt! - moment.at);
  }
  return out;
}
