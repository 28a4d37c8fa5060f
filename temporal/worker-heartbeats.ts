// The server's view of which workers are alive: every SDK worker heartbeats to the server
// (Runtime workerHeartbeatInterval), and ListWorkers returns the last heartbeat of each. Not a
// billed action, so an agent's liveness can be watched for free (workers/liveness.ts). Servers
// without the feature (older ones, or 1.29 without frontend.ListWorkersEnabled) say UNIMPLEMENTED.
import type { Client } from '@temporalio/client';

export interface WorkerSeen {
  taskQueue: string;
  /** The newest heartbeat of any worker on this queue (ms since the epoch). */
  lastHeartbeatMs: number;
}

export class WorkerHeartbeatsUnsupported extends Error {}

/** The newest heartbeat of a task queue's workers. */
export interface QueueBeat {
  /** When it was sent, by the worker's own clock (ms since the epoch). */
  at: number;
  /** It said the worker is shutting down or shut down (a deliberate stop, not a silence). */
  stopping: boolean;
}

/** The newest worker heartbeat per task queue whose name starts with `prefix`, with its status. */
export async function queueBeats(client: Client, prefix: string): Promise<Map<string, QueueBeat>> {
  const seen = new Map<string, QueueBeat>();
  let nextPageToken: Uint8Array | undefined;
  for (let page = 0; page < 100; page++) {
    let response;
    try {
      response = await client.workflowService.listWorkers({ namespace: client.options.namespace, pageSize: 1000, nextPageToken });
    } catch (error) {
      if (/UNIMPLEMENTED|not supported|not enabled/i.test(String(error))) throw new WorkerHeartbeatsUnsupported(String(error));
      throw error;
    }
    for (const info of response.workersInfo ?? []) {
      const heartbeat = info.workerHeartbeat;
      const queue = heartbeat?.taskQueue ?? '';
      if (!queue.startsWith(prefix)) continue;
      const at = Number(heartbeat?.heartbeatTime?.seconds ?? 0) * 1000 + Math.floor(Number(heartbeat?.heartbeatTime?.nanos ?? 0) / 1e6);
      // WORKER_STATUS_SHUTTING_DOWN (2) and WORKER_STATUS_SHUTDOWN (3).
      const stopping = Number(heartbeat?.status ?? 0) >= 2;
      const known = seen.get(queue);
      if (!known || at > known.at) seen.set(queue, { at, stopping });
    }
    nextPageToken = response.nextPageToken?.length ? response.nextPageToken : undefined;
    if (!nextPageToken) break;
  }
  return seen;
}

/** Whether the server keeps worker heartbeats (ListWorkers answers). */
export async function workerHeartbeatsSupported(client: Client): Promise<boolean> {
  try {
    await client.workflowService.listWorkers({ namespace: client.options.namespace, pageSize: 1 });
    return true;
  } catch {
    return false;
  }
}
