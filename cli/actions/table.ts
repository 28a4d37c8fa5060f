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

/**
 * A list as the list commands (status, nodes, weights ls) print it: JSON with --json (in the
 * order found), what to do when there is nothing, else a table with one row per item.
 */
export function printList<T>(
  items: T[],
  how: { json?: boolean | undefined; empty: string; head: string[]; order?: (a: T, b: T) => number; row: (item: T) => string[] },
): void {
  if (how.json) {
    console.log(JSON.stringify(items, null, 2));
    return;
  }
  if (!items.length) {
    console.log(how.empty);
    return;
  }
  const table = newTable({ head: how.head });
  for (const item of how.order ? [...items].sort(how.order) : items) table.push(how.row(item));
  console.log(table.toString());
}
