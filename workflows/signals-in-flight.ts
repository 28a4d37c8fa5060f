// Signals a workflow run sends to another without waiting, counted until each went out. Workflow
// code. The server sends a workflow's signal to another workflow after the task that asked for
// it, and drops it if the sender has closed by then (its transfer task finds the run completed):
// a run that ends or continues as new in the same task as a signal loses it. So a run that sends
// without waiting waits for `allSent` before it ends or hands over (workflows/carried.ts).

export interface SignalsInFlight {
  track(sending: Promise<unknown>): void;
  /** Nothing is on its way: the run may end or continue as new without losing a signal. */
  allSent(): boolean;
}

export function signalsInFlight(): SignalsInFlight {
  let pending = 0;
  return {
    track(sending) {
      pending++;
      // Failed sends count as gone too: the caller's own catch already said why.
      void sending.then(
        () => pending--,
        () => pending--,
      );
    },
    allSent: () => pending === 0,
  };
}
