// The attacker's side of test/e2e/carried-state.test.ts: a workflow a namespace member runs on a
// queue of their own, which continues as new into one of the control plane's long-running types
// on the `llmgw` queue, carrying state of its own making. The continued run has
// `continuedFromExecutionRunId` set, as a genuine hand-over has. Bundled alone by the test.
import { makeContinueAsNewFunc } from '@temporalio/workflow';

export interface ForgeInput {
  workflowType: 'replica' | 'routes' | 'node';
  taskQueue: string;
  /** The input the continued run receives, `carried` (and anything else) included. */
  input: unknown;
}

export async function forgeCarried({ workflowType, taskQueue, input }: ForgeInput): Promise<never> {
  return makeContinueAsNewFunc<(input: unknown) => Promise<unknown>>({ workflowType, taskQueue })(input);
}
