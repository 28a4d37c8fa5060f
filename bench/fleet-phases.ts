// What bench:fleet does to a simulated fleet and reads back from it between its measures:
// waiting for a state, snapshots for the double-held check, kills and their recoveries, and
// where the machine's cores went. Benchmark side.
import type { Client } from '@temporalio/client';
import { describeNodeQuery } from '../workflows/definitions.js';
import type { NodeView } from '../common/node-types.js';
import { countOf } from './fleet-measure.js';
import type { FleetStack } from './fleet-stack.js';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
export const seconds = (ms: number): number => Math.round(ms / 100) / 10;
export type EngineRow = { nodeId: string; shardId: string; cudaVisibleDevices: string };
export const READY_REPLICAS = `WorkflowType = 'replica' AND ExecutionStatus = 'Running' AND LlmgwState = 'Ready'`;

export async function until<T>(what: string, timeoutS: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutS * 1000;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutS} s`);
    await sleep(500);
  }
}

/** Every node workflow's view, and every virtual engine. */
export async function snapshot(stack: FleetStack, hosts: string[]): Promise<{ nodes: NodeView[]; engines: EngineRow[] }> {
  const nodes: NodeView[] = [];
  for (const id of hosts) nodes.push(await describeNode(stack.client, id));
  return { nodes, engines: (await stack.control('engines')).engines as EngineRow[] };
}

/**
 * One node workflow's view. A query can fail for a moment on a busy machine ("query timed out
 * before a worker could process it", seen while the workers wrote their CPU profiles): asked
 * again up to four times, two seconds apart, and the cause is said.
 */
async function describeNode(client: Client, nodeId: string): Promise<NodeView> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery);
    } catch (error) {
      const message = errorText(error);
      if (attempt === 5) throw new Error(`node/${nodeId}: ${message}`, { cause: error });
      console.error(`bench:fleet node/${nodeId} did not answer (${message}); asking again`);
      await sleep(2_000);
    }
  }
}

/**
 * "500 core-s busy (2.0 cores): workers 115, …": where the machine's cores went over a span,
 * from [machine, ...workers, sim-fleet, engine host] CPU seconds.
 */
export function cpuSplit(spent: number[], workers: number, spanS: number): string {
  const [machine, ...parts] = spent;
  const workersCpu = parts.slice(0, workers).reduce((a, b) => a + b, 0);
  const [fleetCpu, enginesCpu] = parts.slice(workers);
  const rest = machine! - workersCpu - fleetCpu! - enginesCpu!;
  const cores = (machine! / Math.max(1, spanS)).toFixed(2);
  return `${Math.round(machine!)} core-s busy (${cores} cores): workers ${Math.round(workersCpu)}, sim-fleet ${Math.round(fleetCpu!)}, engines ${Math.round(enginesCpu!)}, Temporal and the rest ${Math.round(rest)}`;
}

/** Hosts by how many engines they run, busiest first. */
export function busiest(engines: EngineRow[]): string[] {
  const counts = new Map<string, number>();
  for (const row of engines) counts.set(row.nodeId, (counts.get(row.nodeId) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1]).map(([id]) => id);
}

/** Kills hosts; resolves when every replica is Ready again and none is on them. */
export async function replacedAfterKill(stack: FleetStack, killed: string[], total: number, timeoutS: number): Promise<number> {
  const began = Date.now();
  await stack.control(`kill ${killed.join(' ')}`);
  const onKilled = `${READY_REPLICAS} AND LlmgwNodes IN (${killed.map((id) => `'${id}'`).join(', ')})`;
  await until(`replicas of ${killed.length} killed host(s) Ready elsewhere`, timeoutS, async () =>
    (await countOf(stack.client, READY_REPLICAS)) >= total && (await countOf(stack.client, onKilled)) === 0 ? true : undefined,
  );
  return Date.now() - began;
}

/** True once visibility shows the node NotReady or Lost (no worker needs to answer). */
export async function nodeDown(client: Client, nodeId: string): Promise<boolean> {
  const query = `WorkflowId = 'node/${nodeId}' AND ExecutionStatus = 'Running' AND LlmgwState IN ('NotReady', 'Lost')`;
  return (await countOf(client, query)) > 0;
}

/** An error's message and its cause's ("Failed to query Workflow: 4 DEADLINE_EXCEEDED: …"), once each. */
export function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error && !error.message.includes(error.cause.message) ? `: ${error.cause.message}` : '';
  return `${error.message}${cause}`;
}
