// How `llmgw up` stops: within 20 s of Ctrl-C whatever Temporal's state (every call to it has
// a deadline, and so does every process it waits for), and at once on a second Ctrl-C. CLI
// side. The demo's replicas are terminated and their GPUs given back while the control worker
// still runs; then the processes this started, their engines, and the dev server end.
import type { ChildProcess } from 'node:child_process';
import type { Client } from '@temporalio/client';
import { killMarkedEngines } from '../../agent/supervisor/processes/markers.js';
import { signalGroup } from '../../agent/supervisor/processes/proc.js';
import { deploymentWorkflowId, nodeWorkflowId } from '../../common/names.js';
import type { DevServer } from '../../temporal/dev-server.js';
import { deploymentStatusQuery, describeNodeQuery, releaseUpdate } from '../../workflows/definitions.js';
import { signedNodeRequest } from '../../activities/node-requests.js';

/** The whole stop, Ctrl-C to exit, stays under this. */
export const STOP_BUDGET_MS = 20_000;
/** Asking Temporal to terminate the demo and free its GPUs: at most this much of the budget. */
const TEARDOWN_MS = 8_000;
/** One call to Temporal: a server that is gone must not hold the stop for the client's retries. */
const CALL_MS = 3_000;
/** Processes get SIGTERM, then SIGKILL this long before the budget ends. */
const KILL_MARGIN_MS = 3_500;
/** With Temporal gone, the worker and agents cannot confirm anything: SIGKILL after this. */
const GRACE_WITHOUT_TEMPORAL_MS = 3_000;

export interface Stack {
  children: { name: string; child: ChildProcess }[];
  server: DevServer | undefined;
  client: Client | undefined;
  nodeIds: string[];
  /** The deployment `llmgw up` made: `demo`, or `gemma-3-270m` with --real. */
  deployment: string;
  say(line: string): void;
  /** Set when a call to Temporal timed out: later calls are skipped, processes not waited for long. */
  temporalDown?: boolean;
  /** The stack's catalog key: a release is made with its MAC, as the control worker makes it. */
  catalogKeyFile?: string;
}

// Not unref'd: the stop must finish (and say so) even once no other handle keeps Node alive.
function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** `work` bounded by `ms` (and by the client's gRPC deadline): undefined when it did not finish. */
async function within<T>(stack: Stack, what: string, ms: number, work: (client: Client) => Promise<T>): Promise<T | undefined> {
  const { client } = stack;
  if (!client || ms <= 0 || stack.temporalDown) return undefined;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => {
      stack.say(`gave up on ${what} after ${(ms / 1000).toFixed(1)} s: Temporal does not answer; skipping the rest of the cleanup`);
      stack.temporalDown = true;
      resolve(undefined);
    }, ms);
  });
  try {
    return await Promise.race([client.withDeadline(Date.now() + ms, () => work(client)), timeout]);
  } catch (error) {
    stack.say(`${what}: ${error instanceof Error ? error.message : String(error)}`);
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

/** GPUs held for replicas whose workflows are no longer running (an earlier run's, or the demo's). */
export async function releaseOrphanedAllocations(stack: Stack, deadline: number): Promise<void> {
  for (const nodeId of stack.nodeIds) {
    const left = (): number => Math.min(CALL_MS, deadline - Date.now());
    const view = await within(stack, `reading node/${nodeId}`, left(), (client) =>
      client.workflow.getHandle(nodeWorkflowId(nodeId)).query(describeNodeQuery),
    );
    for (const allocation of view?.allocations ?? []) {
      const status = await within(stack, `describing ${allocation.replicaId}`, left(), (client) =>
        client.workflow
          .getHandle(allocation.replicaId)
          .describe()
          .then(
            (d) => d.status.name,
            () => 'NOT_FOUND',
          ),
      );
      if (status === undefined) return;
      if (status === 'RUNNING') continue;
      await within(stack, `releasing ${allocation.shardId}`, left(), (client) =>
        client.workflow.getHandle(nodeWorkflowId(nodeId)).executeUpdate(releaseUpdate, {
          args: [signedNodeRequest(stack.catalogKeyFile, nodeId, 'release', { shardId: allocation.shardId })],
        }),
      );
    }
  }
}

/**
 * Terminates (not drains) the demo on Ctrl-C: its engines are killed below and their GPUs
 * given back to the node workflows, which stay in the dev server's data file.
 */
async function teardownDemo(stack: Stack, deadline: number): Promise<void> {
  const left = (): number => Math.min(CALL_MS, deadline - Date.now());
  const handle = (client: Client) => client.workflow.getHandle(deploymentWorkflowId(stack.deployment));
  const view = await within(stack, `reading deployment/${stack.deployment}`, left(), (client) =>
    handle(client).query(deploymentStatusQuery),
  );
  for (const replica of view?.replicas ?? []) {
    await within(stack, `terminating ${replica.replicaId}`, left(), (client) =>
      client.workflow.getHandle(replica.replicaId).terminate('llmgw up stopped'),
    );
  }
  if (view)
    await within(stack, `terminating deployment/${stack.deployment}`, left(), (client) => handle(client).terminate('llmgw up stopped'));
  await releaseOrphanedAllocations(stack, deadline);
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

async function waitExited(children: ChildProcess[], deadline: number): Promise<void> {
  while (children.some((child) => !exited(child)) && Date.now() < deadline) await sleep(100);
}

function killAll(stack: Stack, signal: NodeJS.Signals): void {
  for (const { child } of stack.children) if (child.pid && !exited(child)) signalGroup(child.pid, signal);
}

/** The first Ctrl-C: everything ends within STOP_BUDGET_MS. */
export async function stopStack(stack: Stack, startedAt = Date.now()): Promise<void> {
  const end = startedAt + STOP_BUDGET_MS;
  await teardownDemo(stack, Math.min(startedAt + TEARDOWN_MS, end));
  // The worker last: the teardown's Updates needed it.
  killAll(stack, 'SIGTERM');
  const children = stack.children.map(({ child }) => child);
  await waitExited(children, stack.temporalDown ? Math.min(Date.now() + GRACE_WITHOUT_TEMPORAL_MS, end) : end - KILL_MARGIN_MS);
  const stubborn = stack.children.filter(({ child }) => !exited(child));
  if (stubborn.length > 0) {
    stack.say(`${stubborn.map(({ name }) => name).join(', ')} did not stop in time (Temporal unreachable?): SIGKILL`);
    killAll(stack, 'SIGKILL');
    await waitExited(children, end - 2_000);
  }
  killMarkedEngines(stack.nodeIds);
  await stopServer(stack, end - 500);
}

async function stopServer(stack: Stack, deadline: number): Promise<void> {
  const { server } = stack;
  if (!server) return;
  signalGroup(server.pid, 'SIGTERM');
  const gone = await Promise.race([server.exited.then(() => true), sleep(Math.max(0, deadline - Date.now())).then(() => false)]);
  if (!gone) signalGroup(server.pid, 'SIGKILL');
}

/** The second Ctrl-C: SIGKILL to everything this started, engines included, and out. */
export function killStack(stack: Stack): void {
  killAll(stack, 'SIGKILL');
  killMarkedEngines(stack.nodeIds);
  if (stack.server) signalGroup(stack.server.pid, 'SIGKILL');
}
