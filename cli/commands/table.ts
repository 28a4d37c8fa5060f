// Tables for the CLI's human output: colour only on a terminal, and never with NO_COLOR
// (https://no-color.org): escapes in a pipe or a file are noise to whoever reads it next.
import Table from 'cli-table3';

export type TableOptions = ConstructorParameters<typeof Table>[0];

export function useColour(stream: NodeJS.WriteStream = process.stdout, env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(stream.isTTY) && !env.NO_COLOR;
}

export function newTable(options: TableOptions = {}, colour = useColour()): Table.Table {
  return new Table(colour ? options : { ...options, style: { ...options.style, head: [], border: [] } });
}
