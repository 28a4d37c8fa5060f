// How often the agent's presence activity heartbeats. Presence is the node workflow's own way
// to see a dead agent; each heartbeat that reaches the server is a billed action. Where the
// server keeps worker heartbeats (ListWorkers), the control worker sees a dead agent from those
// in seconds and for free (workers/liveness.ts), so presence only needs to be a slow backstop.
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { workerHeartbeatsSupported } from '../../temporal/worker-heartbeats.js';
import { describeNodeQuery } from '../../workflows/definitions.js';

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
/** A node that still thinks this agent gone after it registered again is not asked again sooner. */
const REREGISTER_AFTER_MS = 30_000;
/**
 * A node that shows Unenrolled is asked again this rarely: its enrollment may have come after the
 * run that held this agent's last registration continued as new (workflows/node/enrollment.ts).
 */
const UNENROLLED_REREGISTER_MS = 60_000;
const CALL_DEADLINE_MS = 8_000;

/**
 * Registers again (which starts the node workflow anew) when the node workflow is missing or
 * closed, and when it holds this agent NotReady or Lost although the agent is plainly talking
 * to Temporal: a host back from a partition. Its worker's heartbeats tell the control worker it
 * is heard, but a Lost node forgot what runs there, and with a slow presence no new presence
 * activity comes to make the agent register; the registration brings the node Ready with the
 * engines that run, and the reconciliation it starts stops those whose replicas moved away
 * (docs/failures.md, "A host cut off from the network"). A describe is a read, not a billed
 * action; an unreachable Temporal is not "missing".
 */
export function watchNodeWorkflow(
  client: () => Client | undefined,
  workflowId: string,
  register: () => void,
  reregisterAfterSeconds?: number,
): { stop(): void } {
  let checking = false;
  let lastReregister = 0;
  const timer = setInterval(() => {
    const c = client();
    if (!c || checking) return;
    checking = true;
    const handle = c.workflow.getHandle(workflowId);
    // A deadline: a call made on a connection that a partition froze must not keep the next
    // look from happening once the link is back.
    const soon = <T>(call: () => Promise<T>): Promise<T> => c.connection.withDeadline(Date.now() + CALL_DEADLINE_MS, call);
    soon(() => handle.describe())
      .then(
        async (description) => {
          if (description.status.name !== 'RUNNING') return register();
          const state = description.searchAttributes?.LlmgwState;
          let phase = Array.isArray(state) ? state[0] : undefined;
          // A cordoned node shows Cordoned whatever its phase: ask it (rare, so the query is too).
          if (phase === 'Cordoned') phase = (await soon(() => handle.query(describeNodeQuery)).catch(() => undefined))?.phase;
          const again = phase === 'Unenrolled' ? UNENROLLED_REREGISTER_MS : (reregisterAfterSeconds ?? REREGISTER_AFTER_MS / 1000) * 1000;
          if ((phase === 'NotReady' || phase === 'Lost' || phase === 'Unenrolled') && Date.now() - lastReregister > again) {
            lastReregister = Date.now();
            register();
          }
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
