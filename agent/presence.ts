// How often the agent's presence activity heartbeats. Presence is the node workflow's own way
// to see a dead agent; each heartbeat that reaches the server is a billed action. Where the
// server keeps worker heartbeats (ListWorkers), the control worker sees a dead agent from those
// in seconds and for free (workers/liveness.ts), so presence only needs to be a slow backstop.
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { workerHeartbeatsSupported } from '../temporal/worker-heartbeats.js';

/** Without worker heartbeats, presence is the detector: a dead agent is NotReady within this. */
export const SHORT_PRESENCE_SECONDS = 10;
/** With them, a backstop: about 15 heartbeats (billed actions) an hour. */
export const BACKSTOP_PRESENCE_SECONDS = 300;

export async function presenceHeartbeatFor(flag: number | undefined, client: Client): Promise<number> {
  if (flag !== undefined) return flag;
  return (await workerHeartbeatsSupported(client)) ? BACKSTOP_PRESENCE_SECONDS : SHORT_PRESENCE_SECONDS;
}

/** How often the agent looks whether its node workflow still runs. */
const NODE_CHECK_MS = 10_000;

/**
 * Registers again (which starts the node workflow anew) when the node workflow is missing or
 * closed. A describe is a read, not a billed action; an unreachable Temporal is not "missing".
 */
export function watchNodeWorkflow(client: () => Client | undefined, workflowId: string, register: () => void): { stop(): void } {
  let checking = false;
  const timer = setInterval(() => {
    const c = client();
    if (!c || checking) return;
    checking = true;
    c.workflow
      .getHandle(workflowId)
      .describe()
      .then(
        (description) => {
          if (description.status.name !== 'RUNNING') register();
        },
        (error: unknown) => {
          if (error instanceof WorkflowNotFoundError) register();
        },
      )
      .finally(() => (checking = false));
  }, NODE_CHECK_MS);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
