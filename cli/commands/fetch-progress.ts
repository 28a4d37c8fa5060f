// What `llmgw status` and `deploy --wait` say about a replica that is fetching its weights:
// the progress line its fetchWeights activities heartbeat (one per host), read from the
// replica workflow's pending activities. Operator side.
import type { WorkflowHandle } from '@temporalio/client';

/** `Fetching 37% · 18 MB of 48 MB · 1.5 MB/s · 20s left · model-00003…` per host, or undefined. */
export async function fetchProgressOf(handle: WorkflowHandle): Promise<string | undefined> {
  const described = await handle.describe().catch(() => undefined);
  const lines: string[] = [];
  for (const pending of described?.raw.pendingActivities ?? []) {
    if (pending.activityType?.name !== 'fetchWeights') continue;
    const data = pending.heartbeatDetails?.payloads?.[0]?.data;
    let summary = 'Fetching: no progress reported yet';
    if (data) {
      try {
        const details = JSON.parse(Buffer.from(data).toString('utf8')) as { summary?: unknown };
        if (typeof details.summary === 'string') summary = details.summary;
      } catch {
        // Details written by another version: the phase still says Fetching.
      }
    }
    lines.push(summary);
  }
  return lines.length ? lines.join('; ') : undefined;
}
