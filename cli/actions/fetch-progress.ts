// What `llmgw status` and `deploy --wait` say about a replica that is fetching its weights:
// the progress line its fetchWeights activities heartbeat (one per host), read from the
// replica workflow's pending activities. Operator side.
import type { WorkflowHandle } from '@temporalio/client';

/** One host's fetch of a workflow's weights, as its fetchWeights activity last heartbeat it. */
export interface HostFetch {
  host: string;
  /** `Fetching 37% · 18 MB of 48 MB · …`, or undefined before the first heartbeat. */
  summary: string | undefined;
  attempt: number;
  lastFailure: string | undefined;
}

/** The workflow's pending fetchWeights activities, one per host. */
export async function pendingFetches(handle: WorkflowHandle): Promise<HostFetch[]> {
  const described = await handle.describe().catch(() => undefined);
  return (described?.raw.pendingActivities ?? [])
    .filter((p) => p.activityType?.name === 'fetchWeights')
    .map((p, i) => ({
      host: p.activityOptions?.taskQueue?.name?.replace(/^agent\//, '') ?? `host ${i + 1}`,
      summary: summaryOf(p.heartbeatDetails?.payloads?.[0]?.data),
      attempt: p.attempt ?? 1,
      lastFailure: p.lastFailure?.message ?? undefined,
    }));
}

function summaryOf(data: Uint8Array | null | undefined): string | undefined {
  if (!data) return undefined;
  try {
    const details = JSON.parse(Buffer.from(data).toString('utf8')) as { summary?: unknown };
    return typeof details.summary === 'string' ? details.summary : undefined;
  } catch {
    // Details written by another version: the phase still says Fetching.
    return undefined;
  }
}

/** `Fetching 37% · 18 MB of 48 MB · 1.5 MB/s · 20s left · model-00003…` per host, or undefined. */
export async function fetchProgressOf(handle: WorkflowHandle): Promise<string | undefined> {
  const fetches = await pendingFetches(handle);
  return fetches.length ? fetches.map((f) => f.summary ?? 'Fetching: no progress reported yet').join('; ') : undefined;
}
