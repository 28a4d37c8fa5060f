// What the operator reads when a command fails: the reason in its own words. Shared by main.ts
// (every command) and the actions; light on purpose, so that main loads no Temporal code.

/** An error meant for the operator: main prints its message alone. */
export class CliError extends Error {}

// A workflow's failure and an Update's rejection both arrive wrapped ("Workflow execution
// failed", "Workflow Update failed"); the ApplicationFailure in `cause` says why. Matched by
// name, as the SDK marks its errors, so that this module needs no @temporalio import.
const WRAPPERS = new Set(['WorkflowFailedError', 'WorkflowUpdateFailedError']);

export function failureMessage(error: unknown): string {
  if (error instanceof Error && WRAPPERS.has(error.name) && error.cause instanceof Error) return error.cause.message;
  return error instanceof Error ? error.message : String(error);
}
