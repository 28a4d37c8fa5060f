// Flags several commands share, defined once so that their spelling and help agree.
import { Option, type Command } from 'commander';

export const jsonOption = (): Option => new Option('--json', 'machine-readable output');

/** `--wait`'s limit: how long the command waits before it gives up. */
export const waitTimeoutOption = (seconds: number): Option =>
  new Option('--timeout <seconds>', 'how long --wait waits').default(String(seconds));

/** A rollout's pace, as `deploy` (for a rollout it starts) and `rollout` take it. */
export const rolloutPaceOptions = (prefix = ''): Option[] => [
  new Option('--max-surge <n>', `${prefix}replicas above the count while rolling (default 1)`),
  new Option('--max-unavailable <n>', `${prefix}routable replicas it may go below the count (default 0)`),
];

/** Where a Temporal server this command starts listens. */
export const temporalListenOptions = (): Option[] => [
  new Option('--port <port>', 'frontend port').default('7233'),
  new Option('--ip <ip>', 'address to listen on').default('127.0.0.1'),
];

export function withOptions(command: Command, options: Option[]): Command {
  for (const option of options) command.addOption(option);
  return command;
}
