// What the router's waiting lines hold, as others read it: depths by model for the autoscaler's
// load report (with the sheddable part apart), each line by tenant and priority for the admin
// /health, and which held request a higher one's bytes would shed first. Router side; pure reads
// of flow/queue.ts lines.
import type { Held, ModelQueue } from './queue.js';
import { priorityLabel } from './priority.js';

/** What the admin /health shows of one model's line: what is held by tenant and priority, and their requests in flight. */
export interface LineView {
  held: number;
  classes: Array<{ tenant: string; priority: string; held: number; inflight: number }>;
}

/** Requests held, by model (lines that hold none left out). */
export function depthsOf(queues: ReadonlyMap<string, ModelQueue>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [model, q] of queues) if (q.size > 0) out[model] = q.size;
  return out;
}

/** Held requests of sheddable priority (below zero), by model. */
export function sheddableDepthsOf(queues: ReadonlyMap<string, ModelQueue>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [model, q] of queues) {
    const n = q.classes().reduce((sum, c) => sum + (c.priority < 0 ? c.held : 0), 0);
    if (n > 0) out[model] = n;
  }
  return out;
}

/** Each line with requests held: by tenant and priority, with the tenant's requests in flight here. */
export function linesOf(queues: ReadonlyMap<string, ModelQueue>): Record<string, LineView> {
  const out: Record<string, LineView> = {};
  for (const [model, q] of queues) {
    if (q.size === 0) continue;
    const classes = q.classes().map((c) => ({
      tenant: c.tenant,
      priority: priorityLabel(c.priority),
      held: c.held,
      inflight: q.shares.inflightOf(c.tenant),
    }));
    out[model] = { held: q.size, classes };
  }
  return out;
}

/** The held request to shed first for one of `priority`: the newest of the lowest priority below it, across every line. */
export function lowestBelow(queues: ReadonlyMap<string, ModelQueue>, priority: number): Held | undefined {
  let lowest: Held | undefined;
  for (const q of queues.values()) {
    const candidate = q.lowest();
    if (candidate === undefined || candidate.request.flow.priority >= priority) continue;
    const better =
      lowest === undefined ||
      candidate.request.flow.priority < lowest.request.flow.priority ||
      (candidate.request.flow.priority === lowest.request.flow.priority && candidate.heldAt > lowest.heldAt);
    if (better) lowest = candidate;
  }
  return lowest;
}
