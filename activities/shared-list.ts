// One visibility list shared by every activity of this worker that asks the same question at
// the same moment. Placing hundreds of replicas at once asked visibility the same two lists
// (a deployment's replicas, a GPU class's nodes) once per placement; on a busy store each took
// 8–26 s (bench:fleet, 200 hosts) and placements queued behind them. A list in flight is
// joined, and a finished one is reused for a moment: the index may lag a little anyway (the
// node's reserve is the single writer, and the best candidates are asked directly). Control side.
import type { Client, WorkflowExecutionInfo } from '@temporalio/client';

/** How long a finished list answers the same question again. */
const REUSE_MS = 1_000;
/** Questions remembered at most (each a deployment or a GPU class). */
const MAX_ENTRIES = 512;

interface Entry {
  rows: Promise<WorkflowExecutionInfo[]>;
  /** When the list finished (Infinity while in flight: joined by everyone). */
  doneAt: number;
}

const entries = new WeakMap<Client, Map<string, Entry>>();

export function listShared(client: Client, query: string, now: () => number = Date.now): Promise<WorkflowExecutionInfo[]> {
  let cache = entries.get(client);
  if (!cache) entries.set(client, (cache = new Map()));
  const hit = cache.get(query);
  if (hit && now() - hit.doneAt < REUSE_MS) return hit.rows;
  const entry: Entry = { doneAt: Infinity, rows: collect(client, query) };
  cache.set(query, entry);
  entry.rows.then(
    () => (entry.doneAt = now()),
    () => cache.delete(query),
  );
  if (cache.size > MAX_ENTRIES) {
    for (const [key, value] of cache) if (now() - value.doneAt >= REUSE_MS) cache.delete(key);
  }
  return entry.rows;
}

async function collect(client: Client, query: string): Promise<WorkflowExecutionInfo[]> {
  const rows: WorkflowExecutionInfo[] = [];
  for await (const execution of client.workflow.list({ query })) rows.push(execution);
  return rows;
}
