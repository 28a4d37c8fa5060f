// The two sides of test/e2e/signals-in-flight.test.ts: a run that signals another workflow
// without waiting and then continues as new in the same task (as the node did when an agent's
// registration came just before its hand-over), with and without waiting for the signal to go
// out first (workflows/signals-in-flight.ts); and a workflow that counts what reaches it.
import { condition, defineQuery, defineSignal, getExternalWorkflowHandle, makeContinueAsNewFunc, setHandler } from '@temporalio/workflow';
import { signalsInFlight } from '../../workflows/signals-in-flight.js';

export const pingSignal = defineSignal<[]>('ping');
export const pingsQuery = defineQuery<number>('pings');

export interface SenderInput {
  target: string;
  waitForSent: boolean;
  handedOver?: boolean;
}

export async function signalThenHandOver(input: SenderInput): Promise<void> {
  if (input.handedOver) return;
  const inFlight = signalsInFlight();
  inFlight.track(getExternalWorkflowHandle(input.target).signal(pingSignal));
  if (input.waitForSent) await condition(inFlight.allSent);
  await makeContinueAsNewFunc<typeof signalThenHandOver>()({ ...input, handedOver: true });
}

export async function countPings(): Promise<void> {
  let pings = 0;
  setHandler(pingSignal, () => void pings++);
  setHandler(pingsQuery, () => pings);
  await condition(() => false, '10 minutes');
}
