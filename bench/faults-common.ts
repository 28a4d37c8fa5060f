// What the parts of bench:faults share: a row of its table, waiting for a state with a
// bound, and the deployment's view.
import type { Client } from '@temporalio/client';
import { deploymentStatusQuery, describeNodeQuery } from '../workflows/definitions.js';
import type { DeploymentView } from '../common/replica-types.js';

export const DEPLOYMENT = 'faults';
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
export const secs = (ms: number | undefined): string => (ms === undefined ? '—' : `${(ms / 1000).toFixed(1)} s`);
export const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

export interface Row {
  fault: string;
  detectMs?: number;
  recoverMs?: number;
  recovered: string;
  failed: string;
  fenced: string;
  twice: number;
}

export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number, onTick?: () => void): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    onTick?.();
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    await sleep(250);
  }
  throw new Error(`bench:faults: no ${what} within ${timeoutMs / 1000} s`);
}

/** Milliseconds from `since` until `holds` answers true, polled as `until` polls. */
export function msUntil(
  what: string,
  since: number,
  holds: () => Promise<boolean>,
  timeoutMs: number,
  onTick?: () => void,
): Promise<number> {
  return until(what, async () => ((await holds()) ? Date.now() - since : undefined), timeoutMs, onTick);
}

export const status = (client: Client, name = DEPLOYMENT): Promise<DeploymentView> =>
  client.workflow.getHandle(`deployment/${name}`).query(deploymentStatusQuery);
export const readyCount = async (client: Client, name = DEPLOYMENT): Promise<number> =>
  (await status(client, name)).replicas.filter((r) => r.phase === 'Ready').length;
export const nodePhase = async (client: Client, nodeId: string): Promise<string> =>
  (await client.workflow.getHandle(`node/${nodeId}`).query(describeNodeQuery)).phase;
