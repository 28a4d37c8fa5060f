// Waking the replicas that wait for GPUs. Whoever frees GPUs on a node (a replica's release,
// reconciliation's release, a registration, an uncordon, a sharer falling asleep) calls wakeWaitersFor: it reads the
// node's free GPUs, finds the Unschedulable replicas of that GPU class from visibility (their
// `demand` memo says what each needs), and signals capacityChanged to the oldest ones that fit,
// not to all of them. Control side.
//
// Visibility is the waiting list: nothing is recorded anywhere while a replica waits, so a
// replica that waits for hours costs no events on any node.
import { queryLiteral } from '../common/safe-name.js';
import type { Client } from '@temporalio/client';
import { nodeWorkflowId } from '../common/names.js';
import { fits } from '../common/placement/shared-gpus.js';
import type { DemandMemo } from '../common/replica-types.js';
import { capacityChangedSignal, describeNodeQuery } from '../workflows/definitions.js';

export interface Waiter {
  replicaId: string;
  demand: DemandMemo;
}

/**
 * Which waiters to wake for `free` GPUs on one node: oldest first, as many as fit; gangs always.
 * A waiter able to sleep (`demand.awakeShare`) may also take the GPUs only sleepers hold (`shared`,
 * their awake loads: docs/sleep.md, "Sharing GPUs") where its share fits, after the empty ones.
 */
export function chooseWaitersToWake(waiters: Waiter[], free: number, shared: readonly number[] = []): string[] {
  const woken: string[] = [];
  let remaining = free;
  const sharedLeft = [...shared];
  for (const waiter of [...waiters].sort(
    (a, b) => a.demand.since.localeCompare(b.demand.since) || a.replicaId.localeCompare(b.replicaId),
  )) {
    // A gang needs several hosts; any freed host may be the one it lacked, and gangs are rare.
    if (waiter.demand.nodes > 1) {
      woken.push(waiter.replicaId);
      continue;
    }
    const share = waiter.demand.awakeShare;
    const fitting = share === undefined ? [] : sharedLeft.flatMap((load, i) => (fits(load, share) ? [i] : []));
    const fromEmpty = Math.min(remaining, waiter.demand.gpusPerNode);
    const fromShared = waiter.demand.gpusPerNode - fromEmpty;
    if (fromShared > fitting.length) continue;
    woken.push(waiter.replicaId);
    remaining -= fromEmpty;
    for (const i of fitting.slice(0, fromShared).reverse()) sharedLeft.splice(i, 1);
  }
  return woken;
}

export async function listWaiters(client: Client, gpuClass: string): Promise<Waiter[]> {
  const waiters: Waiter[] = [];
  const query = `WorkflowType = 'replica' AND ExecutionStatus = 'Running' AND LlmgwState = 'Unschedulable' AND LlmgwGpuClass = ${queryLiteral('gpuClass', gpuClass)}`;
  for await (const execution of client.workflow.list({ query })) {
    const demand = execution.memo?.demand as DemandMemo | undefined;
    if (demand && typeof demand.gpusPerNode === 'number') waiters.push({ replicaId: execution.workflowId, demand });
  }
  return waiters;
}

/** Wakes the waiting replicas that the node's free GPUs could take; returns whom it woke. */
export async function wakeWaitersFor(client: Client, nodeId: string, exclude: string[] = []): Promise<string[]> {
  const view = await client.workflow.getHandle(nodeWorkflowId(nodeId)).query(describeNodeQuery);
  const shared = view.sharedGpus ?? [];
  if (view.phase !== 'Ready' || view.cordoned || (!view.freeGpus.length && !shared.length) || !view.inventory?.gpuClass) return [];
  const waiters = (await listWaiters(client, view.inventory.gpuClass)).filter((w) => !exclude.includes(w.replicaId));
  const woken = chooseWaitersToWake(waiters, view.freeGpus.length, shared);
  await Promise.all(
    woken.map((replicaId) =>
      client.workflow
        .getHandle(replicaId)
        .signal(capacityChangedSignal, { nodeId })
        .catch(() => undefined),
    ),
  );
  return woken;
}

export function createCapacityActivities(client: Client) {
  return {
    /**
     * The node workflow's call after a registration or an uncordon added capacity, and a
     * replica's when a wake-up reached it while it was already placing (it passes it on,
     * `exclude` naming itself: visibility may still show it waiting).
     */
    async wakeWaiters(request: { nodeId: string; exclude?: string[] }): Promise<string[]> {
      return wakeWaitersFor(client, request.nodeId, request.exclude);
    },
  };
}
