// The Temporal CLI as a user drives llmgw without it: `temporal workflow start` of a
// deployModel run on the harness's shared dev server, with input as JSON text.
import { execFileSync, type ExecFileSyncOptions } from 'node:child_process';
import { inject } from 'vitest';

/** `--address` of the harness's shared dev server, for other `temporal` commands. */
export function temporalCliAddress(): string[] {
  return ['--address', inject('temporalAddress')];
}

/** Starts `deployment/<name>` with `temporal workflow start`; `input` is the JSON the CLI sends. */
export function temporalStartDeployment(name: string, input: string, options?: ExecFileSyncOptions): void {
  execFileSync(
    inject('temporalBin'),
    [
      ...['workflow', 'start', '--type', 'deployModel', '--task-queue', 'llmgw'],
      ...['--workflow-id', `deployment/${name}`, '--input', input, ...temporalCliAddress()],
    ],
    options,
  );
}
