// How a router process asks for a sleeping replica's wake (engines/wake.ts decides when): the
// `wakeReplica` Update on the replica's workflow, from the one process per router that talks to
// Temporal; a --workers cluster's workers ask the primary over IPC, and the primary sends one
// Update per replica however many workers ask at once. Router side; docs/sleep.md, "The router".
import type { Worker } from 'node:cluster';
import { WorkflowUpdateStage, type Client } from '@temporalio/client';
import type { WakeRequest, WakeResult } from '../../common/sleep-types.js';
import { wakeReplicaUpdate } from '../../workflows/definitions.js';
import type { WakeCaller } from '../engines/wake.js';

/**
 * How long a wake may take to be accepted by the replica's workflow before the router gives up
 * on it and answers what waits: while Temporal or the control worker is down the Update waits,
 * and fails at this deadline, as a wake from zero would.
 */
export const WAKE_DEADLINE_MS = 30_000;
/**
 * Once accepted, the replica owns the wake and answers it, success or failure, within its own
 * bound (5 minutes to make room on a full GPU, workflows/replica/awake-permits.ts); the router
 * waits that long, its held requests still bounded by their line's own limit (300 s). A wake
 * waiting its turn for a full GPU is slow, not lost.
 */
export const WAKE_ACCEPTED_DEADLINE_MS = 330_000;

/** The `wakeReplica` Update through Temporal. Replica ids are their workflows' ids. */
export function temporalWakeCaller(client: () => Promise<Client>, deadlineMs = WAKE_DEADLINE_MS): WakeCaller {
  return async (replicaId, request) => {
    const c = await client();
    const handle = c.workflow.getHandle(replicaId);
    const accepted = await c.connection.withDeadline(Date.now() + deadlineMs, () =>
      handle.startUpdate(wakeReplicaUpdate, { args: [request], waitForStage: WorkflowUpdateStage.ACCEPTED }),
    );
    return c.connection.withDeadline(Date.now() + WAKE_ACCEPTED_DEADLINE_MS, () => accepted.result());
  };
}

/** One call per replica at a time: a second ask while one is in flight shares its answer. */
export function oneWakePerReplica(call: WakeCaller): WakeCaller {
  const inFlight = new Map<string, Promise<WakeResult>>();
  return (replicaId, request) => {
    const seen = inFlight.get(replicaId);
    if (seen !== undefined) return seen;
    const p = call(replicaId, request).finally(() => inFlight.delete(replicaId));
    inFlight.set(replicaId, p);
    return p;
  };
}

const WAKE_ASK = 'llmgw-router:wake?';
const WAKE_ANSWER = 'llmgw-router:wake';

type WakeAsk = { type: typeof WAKE_ASK; id: number; replicaId: string; request: WakeRequest };
type WakeAnswer = { type: typeof WAKE_ANSWER; id: number; result?: WakeResult; error?: string };

export function isWakeAsk(m: unknown): m is WakeAsk {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === WAKE_ASK;
}

function isWakeAnswer(m: unknown): m is WakeAnswer {
  return typeof m === 'object' && m !== null && (m as { type?: unknown }).type === WAKE_ANSWER;
}

/** In the primary: answers a worker's ask with `call` (the shared, deduplicated Update), or says it cannot wake. */
export function answerWake(worker: Pick<Worker, 'isConnected' | 'send'>, ask: WakeAsk, call: WakeCaller | undefined): void {
  const reply = (answer: Omit<WakeAnswer, 'type' | 'id'>) => {
    if (worker.isConnected()) worker.send({ type: WAKE_ANSWER, id: ask.id, ...answer } satisfies WakeAnswer);
  };
  if (call === undefined) return reply({ error: 'this router has no Temporal client to wake replicas with' });
  call(ask.replicaId, ask.request).then(
    (result) => reply({ result }),
    (err: unknown) => reply({ error: (err as Error).message }),
  );
}

/** A worker's channel to its primary: the process itself in a cluster worker; a pair of functions in a test. */
export interface PrimaryChannel {
  readonly connected: boolean;
  send?(message: unknown): boolean;
  on(event: 'message', listener: (message: unknown) => void): unknown;
}

/** In a cluster worker: a WakeCaller that asks the primary, which holds the Temporal client. */
export function wakeThroughPrimary(
  channel: PrimaryChannel = process,
  deadlineMs = WAKE_DEADLINE_MS + WAKE_ACCEPTED_DEADLINE_MS + 5_000,
): WakeCaller {
  let next = 0;
  const pending = new Map<number, { resolve(r: WakeResult): void; reject(e: Error): void; timer: NodeJS.Timeout }>();
  channel.on('message', (message: unknown) => {
    if (!isWakeAnswer(message)) return;
    const waiter = pending.get(message.id);
    if (waiter === undefined) return;
    pending.delete(message.id);
    clearTimeout(waiter.timer);
    if (message.result !== undefined) waiter.resolve(message.result);
    else waiter.reject(new Error(message.error ?? 'the router primary could not wake the replica'));
  });
  return (replicaId, request) =>
    new Promise<WakeResult>((resolve, reject) => {
      if (!channel.connected) return reject(new Error('the router primary is gone'));
      const id = next++;
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new Error('the router primary did not answer the wake'));
      }, deadlineMs);
      timer.unref();
      pending.set(id, { resolve, reject, timer });
      channel.send?.({ type: WAKE_ASK, id, replicaId, request } satisfies WakeAsk);
    });
}
