// Makes sure the `routes` workflow runs: the control worker starts it at startup if it is not
// running (an existing one is kept, with its table). Control plane side; routers only read it.
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { CONTROL_TASK_QUEUE } from '../common/names.js';
import { ROUTES_WORKFLOW_ID, ROUTES_WORKFLOW_TYPE } from '../workflows/routes/definitions.js';
import type { RoutesInput } from '../workflows/routes/workflow.js';

const RETRY_MS = 5_000;

/**
 * Starts the routes workflow unless one is running, retrying until it succeeds or `signal`
 * aborts. Resolves once it runs. Never throws: a worker that cannot start it still serves, and
 * routers fall back to reading visibility meanwhile.
 */
export async function ensureRoutesWorkflow(client: Client, log: (line: string) => void, signal?: AbortSignal): Promise<void> {
  for (let attempt = 1; !signal?.aborted; attempt++) {
    try {
      const handle = await client.workflow.start(ROUTES_WORKFLOW_TYPE, {
        workflowId: ROUTES_WORKFLOW_ID,
        taskQueue: CONTROL_TASK_QUEUE,
        args: [{} satisfies RoutesInput],
        workflowIdConflictPolicy: 'USE_EXISTING',
        staticSummary: 'the route table every router installs',
      });
      if (attempt > 1) log(`routes workflow running (run ${handle.firstExecutionRunId})`);
      return;
    } catch (err) {
      if (attempt === 1) log(`could not start the routes workflow, retrying every ${RETRY_MS / 1000} s: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, RETRY_MS).unref());
    }
  }
}

/** How often the control worker looks that the routes workflow still runs. */
const CHECK_EVERY_MS = 15_000;

/**
 * Keeps the routes workflow running: at start, and again whenever a look (a describe, which
 * records nothing) finds it gone (Temporal lost its data, someone ended it). Returns a stop.
 */
export function keepRoutesWorkflow(client: Client, log: (line: string) => void): () => void {
  const controller = new AbortController();
  let checking = false;
  void ensureRoutesWorkflow(client, log, controller.signal);
  const timer = setInterval(() => {
    if (checking) return;
    checking = true;
    client.workflow
      .getHandle(ROUTES_WORKFLOW_ID)
      .describe()
      .then((d) => (d.status.name === 'RUNNING' ? undefined : ensureRoutesWorkflow(client, log, controller.signal)))
      .catch((error: unknown) =>
        error instanceof WorkflowNotFoundError ? ensureRoutesWorkflow(client, log, controller.signal) : undefined,
      )
      .finally(() => (checking = false));
  }, CHECK_EVERY_MS);
  timer.unref();
  return () => {
    controller.abort();
    clearInterval(timer);
  };
}
