// The workflow half of sealed carried state (docs/signed-statements.md, "Carried state is sealed"): a run
// seals the input it hands to its next run, and a continued run opens it before acting on it.
// `continuedFromExecutionRunId` alone proves nothing: any workflow can continue as new into our
// types on our queue with whatever it likes to carry. The MAC is the control worker's
// (activities/carried-state.ts), run as a local activity: one marker event each side of a
// continue-as-new, and the state itself is never written to the history twice.
import { allHandlersFinished, condition, log, proxyLocalActivities, workflowInfo } from '@temporalio/workflow';
import type { ControlActivities } from '../activities/index.js';
import type { SealBinding } from '../common/carried-seal.js';

/** What a continued run's input carries besides its state. */
export interface SealedInput {
  /** The control worker's MAC over the rest of the input, this workflow and the run that sealed it. */
  seal?: string;
  /** Set by the hand-over to a new llmgw build (workflows/upgrade.ts). */
  upgrading?: boolean;
}

function localSeal(): Pick<ControlActivities, 'sealCarriedState' | 'openCarriedState'> {
  return proxyLocalActivities<ControlActivities>({
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
  });
}

function binding(runId: string): SealBinding {
  const info = workflowInfo();
  return { workflowType: info.workflowType, workflowId: info.workflowId, firstExecutionRunId: info.firstExecutionRunId, runId };
}

/**
 * The next run's input, as `build` makes it, sealed for it. A handler may change the state while
 * the seal is made: then it is made again, so what is sealed is what is carried, all of it. One
 * that began meanwhile and still waits (a registration being verified) is let finish first:
 * the continue-as-new that follows would cut it off, and what it was told would be lost. So is
 * whatever `sent` says is still on its way: a signal to another workflow that this run has not
 * seen delivered is dropped by the server once the run has continued as new.
 */
export async function sealForNextRun<T extends SealedInput>(build: () => T, sent: () => boolean = () => true): Promise<T> {
  const settled = (): boolean => allHandlersFinished() && sent();
  for (;;) {
    await condition(settled);
    const text = JSON.stringify(build());
    const { seal: _previous, ...rest } = JSON.parse(text) as T;
    const seal = await localSeal().sealCarriedState({ binding: binding(workflowInfo().runId), input: rest });
    if (settled() && JSON.stringify(build()) === text) return (seal ? { ...rest, seal } : rest) as T;
  }
}

/**
 * Why this run may not act on the state its input carries, or undefined when it may: only a
 * continued run whose seal verifies for this workflow and the run it continues from may (or,
 * once, an unsealed hand-over from an older llmgw build: activities/carried-state.ts).
 * `rawInput` is the input as it arrived. Logs the refusal; the caller then starts from nothing.
 */
export async function refusedCarried(rawInput: SealedInput): Promise<string | undefined> {
  const from = workflowInfo().continuedFromExecutionRunId;
  const { seal, ...rest } = rawInput;
  const verdict = from
    ? await localSeal().openCarriedState({ binding: binding(from), input: rest, seal, upgrading: rawInput.upgrading })
    : { ok: false as const, why: 'this run was not continued from another' };
  if (verdict.ok) {
    if (verdict.note) log.info(`carried state accepted: ${verdict.note}`);
    return undefined;
  }
  log.warn(`carried state refused (${verdict.why}): starting from nothing`);
  return verdict.why;
}
